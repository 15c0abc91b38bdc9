//! Tidy rule: crates form layers, listed bottom to top in `ARCHITECTURE.md`
//! in the fenced block right after the line [`MARKER`]; a crate may only
//! depend on crates listed before it, and xtask on none. It must never accept
//! a workspace crate that the list leaves out.

use std::collections::BTreeMap;

use super::Violation;
use super::manifest::Dep;

/// The exact line that precedes the fenced layer list in `ARCHITECTURE.md`.
pub(crate) const MARKER: &str = "<!-- tidy:layers (bottom to top) -->";

/// The crate that must depend on no workspace crate and is not layered.
const TOOLING: &str = "xtask";

/// A workspace crate and its dependencies.
#[derive(Debug, Clone)]
pub(crate) struct CrateDeps {
    /// Package name.
    pub(crate) name: String,
    /// Manifest path relative to the root, for messages.
    pub(crate) manifest: String,
    /// Every dependency entry.
    pub(crate) deps: Vec<Dep>,
}

/// The crate names of the layer list with their 1-based lines, lowest first.
///
/// Errors are violations in `arch_file` (missing marker or fence, lines that
/// are not one crate name).
pub(crate) fn parse_layers(
    arch_file: &str,
    arch_md: &str,
) -> Result<Vec<(String, usize)>, Vec<Violation>> {
    let mut lines = arch_md.lines().enumerate().map(|(i, l)| (i + 1, l));
    let missing = || {
        vec![Violation::new(
            arch_file,
            1,
            format!(
                "no line `{MARKER}` followed by a fenced code block listing the crates, \
                 one per line, lowest layer first"
            ),
        )]
    };
    if !lines.by_ref().any(|(_, l)| l.trim() == MARKER) {
        return Err(missing());
    }
    match lines.by_ref().find(|(_, l)| !l.trim().is_empty()) {
        Some((_, l)) if l.trim_start().starts_with("```") => {}
        _ => return Err(missing()),
    }
    let mut names = Vec::new();
    let mut errors = Vec::new();
    let mut closed = false;
    for (n, line) in lines {
        let line = line.trim();
        if line.starts_with("```") {
            closed = true;
            break;
        }
        if line.is_empty() {
            continue;
        }
        if line.split_whitespace().count() > 1 {
            errors.push(Violation::new(
                arch_file,
                n,
                format!("layer list: one crate per line, found `{line}`"),
            ));
        } else if names.iter().any(|(name, _)| name == line) {
            errors.push(Violation::new(
                arch_file,
                n,
                format!("layer list: `{line}` is listed twice"),
            ));
        } else {
            names.push((line.to_owned(), n));
        }
    }
    if !closed {
        errors.push(Violation::new(
            arch_file,
            arch_md.lines().count().max(1),
            "layer list: the fenced code block is not closed".to_owned(),
        ));
    }
    if errors.is_empty() {
        Ok(names)
    } else {
        Err(errors)
    }
}

/// Violations of the layer order for `crates` (which include xtask).
pub(crate) fn check_layers(arch_file: &str, arch_md: &str, crates: &[CrateDeps]) -> Vec<Violation> {
    let mut out = Vec::new();
    let members: Vec<&str> = crates.iter().map(|c| c.name.as_str()).collect();
    let local_deps = |krate: &CrateDeps| -> Vec<Dep> {
        krate
            .deps
            .iter()
            .filter(|d| d.local && members.contains(&d.name.as_str()))
            .cloned()
            .collect()
    };
    for krate in crates.iter().filter(|c| c.name == TOOLING) {
        for dep in local_deps(krate) {
            out.push(Violation::new(
                &krate.manifest,
                dep.line,
                format!(
                    "{TOOLING} must not depend on workspace crate `{}`",
                    dep.name
                ),
            ));
        }
    }
    let layers = match parse_layers(arch_file, arch_md) {
        Ok(layers) => layers,
        Err(errors) => {
            out.extend(errors);
            return out;
        }
    };
    let rank: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (name.as_str(), i))
        .collect();
    for (name, line) in &layers {
        if !members.contains(&name.as_str()) || name == TOOLING {
            out.push(Violation::new(
                arch_file,
                *line,
                format!("layer list names `{name}`, which is not a layered workspace crate"),
            ));
        }
    }
    for krate in crates.iter().filter(|c| c.name != TOOLING) {
        let Some(&own) = rank.get(krate.name.as_str()) else {
            out.push(Violation::new(
                &krate.manifest,
                1,
                format!(
                    "crate `{}` is missing from the layer list in {arch_file} (after `{MARKER}`)",
                    krate.name
                ),
            ));
            continue;
        };
        for dep in local_deps(krate) {
            match rank.get(dep.name.as_str()) {
                Some(&theirs) if theirs < own => {}
                // A dev-dependency on itself turns on a feature for its own tests (`testkit`).
                Some(_) if dep.name == krate.name && dep.section.contains("dev-dependencies") => {}
                Some(&theirs) => out.push(Violation::new(
                    &krate.manifest,
                    dep.line,
                    format!(
                        "`{}` (layer {}) depends on `{}` (layer {}) in [{}]; a crate may only \
                         depend on crates listed before it in {arch_file}",
                        krate.name,
                        own + 1,
                        dep.name,
                        theirs + 1,
                        dep.section
                    ),
                )),
                // The missing crate is reported on its own manifest.
                None => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! Layer parsing and checking on in-memory inputs.

    use super::*;

    fn arch(list: &str) -> String {
        format!("# Architecture\n\n{MARKER}\n```text\n{list}```\n\nMore text.\n")
    }

    fn krate(name: &str, deps: &[(&str, usize)]) -> CrateDeps {
        CrateDeps {
            name: name.to_owned(),
            manifest: format!("crates/{name}/Cargo.toml"),
            deps: deps
                .iter()
                .map(|(d, line)| Dep {
                    name: (*d).to_owned(),
                    section: "dependencies".to_owned(),
                    local: true,
                    line: *line,
                })
                .collect(),
        }
    }

    fn messages(v: &[Violation]) -> Vec<String> {
        v.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn parses_list_with_lines() {
        let got = parse_layers("A.md", &arch("pattern_db\n\npattern\n"));
        assert_eq!(
            got.ok(),
            Some(vec![
                ("pattern_db".to_owned(), 5),
                ("pattern".to_owned(), 7)
            ])
        );
    }

    #[test]
    fn a_dev_dependency_on_itself_is_allowed_a_normal_one_is_not() {
        let list = arch("pattern_db\n");
        let mut dev = krate("pattern_db", &[("pattern_db", 20)]);
        dev.deps[0].section = "dev-dependencies".to_owned();
        assert!(check_layers("A.md", &list, &[dev]).is_empty());
        let normal = krate("pattern_db", &[("pattern_db", 20)]);
        assert_eq!(check_layers("A.md", &list, &[normal]).len(), 1);
    }

    #[test]
    fn missing_marker_or_fence() {
        assert!(parse_layers("A.md", "# nothing\n").is_err());
        let no_fence = format!("{MARKER}\n\nplain text\n");
        assert!(parse_layers("A.md", &no_fence).is_err());
        let unclosed = format!("{MARKER}\n```\na\n");
        assert!(parse_layers("A.md", &unclosed).is_err());
    }

    #[test]
    fn rejects_two_per_line_and_duplicates() {
        let got = parse_layers("A.md", &arch("a b\nc\nc\n"));
        let got = messages(&got.err().unwrap_or_default());
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].starts_with("A.md:5:"));
        assert!(got[1].starts_with("A.md:7:"));
    }

    #[test]
    fn accepts_downward_deps() {
        let crates = [
            krate("pattern_db", &[]),
            krate("pattern", &[("pattern_db", 3)]),
            krate("xtask", &[]),
        ];
        let got = check_layers("A.md", &arch("pattern_db\npattern\n"), &crates);
        assert!(got.is_empty(), "{:?}", messages(&got));
    }

    #[test]
    fn flags_upward_and_same_layer_deps() {
        let crates = [
            krate("pattern_db", &[("pattern", 9)]),
            krate("pattern", &[]),
        ];
        let got = messages(&check_layers(
            "A.md",
            &arch("pattern_db\npattern\n"),
            &crates,
        ));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("crates/pattern_db/Cargo.toml:9: `pattern_db` (layer 1)"));
    }

    #[test]
    fn ignores_non_local_deps_and_non_members() {
        let mut c = krate("pattern_db", &[("serde", 4)]);
        c.deps.push(Dep {
            name: "pattern".to_owned(),
            section: "dependencies".to_owned(),
            local: false,
            line: 5,
        });
        let crates = [c, krate("pattern", &[])];
        let got = check_layers("A.md", &arch("pattern_db\npattern\n"), &crates);
        assert!(got.is_empty(), "{:?}", messages(&got));
    }

    #[test]
    fn flags_missing_and_unknown_crates() {
        let crates = [
            krate("pattern_db", &[]),
            krate("pattern", &[("pattern_db", 2)]),
        ];
        let got = messages(&check_layers("A.md", &arch("pattern_db\nghost\n"), &crates));
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].starts_with("A.md:6: layer list names `ghost`"));
        assert!(got[1].starts_with("crates/pattern/Cargo.toml:1: crate `pattern` is missing"));
    }

    #[test]
    fn xtask_depends_on_no_workspace_crate() {
        let crates = [
            krate("pattern_db", &[]),
            krate("xtask", &[("pattern_db", 12)]),
        ];
        let got = messages(&check_layers("A.md", &arch("pattern_db\n"), &crates));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("crates/xtask/Cargo.toml:12: xtask must not depend"));
    }

    #[test]
    fn missing_list_is_one_violation_plus_xtask_check() {
        let crates = [krate("pattern_db", &[])];
        let got = check_layers("A.md", "# no list\n", &crates);
        assert_eq!(got.len(), 1);
    }
}
