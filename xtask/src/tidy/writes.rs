//! Tidy rule (decision 0023): the storage layer's writes belong to their domains. A type that
//! implements the writer's `Write` is declared in `crates/pattern_db/src/ops/` beside its SQL,
//! and no enum implementing it gathers more than [`MAX_WRITE_VARIANTS`] variants (one write per
//! action; an enum of every write is what this rule keeps out). It must never parse Rust beyond
//! these line patterns, and never flag a file outside `pattern_db`.

use super::Violation;

/// Most variants an enum that is one write may have (the protocol's meeting actions: 10).
pub(crate) const MAX_WRITE_VARIANTS: usize = 12;

/// The name `impl ... Write for NAME` implements `Write` for, if the line is one.
fn write_impl(line: &str) -> Option<&str> {
    let line = line.trim_start();
    let rest = line.strip_prefix("impl")?;
    let (trait_part, ty) = rest.split_once(" for ")?;
    let mut path = trait_part.trim().rsplit("::");
    let trait_name = path.next()?;
    // `io::Write` (a byte sink, such as a file the full-text index writes) is not the store's.
    if trait_name != "Write" || path.next() == Some("io") {
        return None;
    }
    let ty = ty.split_whitespace().next()?.trim_end_matches('{');
    ty.rsplit("::").next().filter(|name| !name.is_empty())
}

/// Variants of `enum NAME` in `text`, with the line of its declaration.
pub(crate) fn enum_variants(text: &str, name: &str) -> Option<(usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.iter().position(|l| {
        let l = l.trim_start();
        let l = l
            .strip_prefix("pub(crate) ")
            .or_else(|| l.strip_prefix("pub "))
            .unwrap_or(l);
        l.strip_prefix("enum ")
            .and_then(|r| r.strip_prefix(name))
            .is_some_and(|r| r.trim_start().starts_with('{'))
    })?;
    let indent = lines[start].len() - lines[start].trim_start().len();
    let variant_indent = indent + 4;
    let mut count = 0;
    for line in &lines[start + 1..] {
        let trimmed = line.trim_start();
        let this = line.len() - trimmed.len();
        if this == indent && trimmed.starts_with('}') {
            break;
        }
        if this == variant_indent && trimmed.starts_with(|c: char| c.is_ascii_uppercase()) {
            count += 1;
        }
    }
    Some((start + 1, count))
}

/// Violations in `files` (`(path relative to the root, text)` of `pattern_db`'s sources).
pub(crate) fn check(files: &[(String, String)]) -> Vec<Violation> {
    let mut out = Vec::new();
    for (path, text) in files {
        for (i, line) in text.lines().enumerate() {
            let Some(name) = write_impl(line) else {
                continue;
            };
            if !path.starts_with("crates/pattern_db/src/ops/") && !path.ends_with("src/ops.rs") {
                out.push(Violation::new(
                    path,
                    i + 1,
                    format!("`{name}` implements `Write` outside `ops/`: a write lives beside its domain's SQL"),
                ));
            }
            for (epath, etext) in files {
                if let Some((line, variants)) = enum_variants(etext, name)
                    && variants > MAX_WRITE_VARIANTS
                {
                    out.push(Violation::new(
                        epath,
                        line,
                        format!(
                            "enum `{name}` is one write with {variants} variants (at most {MAX_WRITE_VARIANTS}): give each write its own type in its domain"
                        ),
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, text: &str) -> (String, String) {
        (path.to_owned(), text.to_owned())
    }

    #[test]
    fn finds_write_impls() {
        assert_eq!(write_impl("impl Write for CreateKey {"), Some("CreateKey"));
        assert_eq!(write_impl("impl crate::writer::Write for Op {"), Some("Op"));
        assert_eq!(write_impl("impl std::io::Write for Sink {"), None);
        assert_eq!(write_impl("impl io::Write for Sink {"), None);
        assert_eq!(write_impl("impl Display for X {"), None);
    }

    #[test]
    fn a_big_write_enum_and_a_write_outside_ops_are_flagged() {
        let variants: String = (0..13).map(|i| format!("    V{i},\n")).collect();
        let big = format!("pub(crate) enum Op {{\n{variants}}}\nimpl Write for Op {{}}\n");
        let got = check(&[file("crates/pattern_db/src/ops.rs", &big)]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].line, 1);

        let small = "enum Small {\n    A { x: u8 },\n    B,\n}\nimpl Write for Small {}\n";
        assert!(check(&[file("crates/pattern_db/src/ops/x.rs", small)]).is_empty());
        let outside = check(&[file("crates/pattern_db/src/db.rs", small)]);
        assert_eq!(outside.len(), 1);
        assert!(outside[0].message.contains("outside `ops/`"));
    }
}
