//! `pattern_api`: the JSON shapes of Pattern's front doors, one definition shared by the HTTP
//! API (`pattern_server`) and the CLI's `--json` output (`pattern_cli`), built from the layers'
//! types through the facade.
//!
//! The shapes are a public contract (documented in `docs/cli.md` and in the server's OpenAPI
//! document): a field may be added, never renamed or removed without a documented change. This
//! crate must never read or write the database, and never depend on a front end: both front
//! ends depend on it, so neither has to depend on the other for a shape.

pub mod views;

/// An error and its sources on one line: what the server answers and the CLI prints.
pub fn one_line(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[derive(Debug)]
    struct Outer(Inner);
    #[derive(Debug)]
    struct Inner;
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot open the store")
        }
    }
    impl std::fmt::Display for Inner {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "disk\nfull")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    impl std::error::Error for Inner {}

    #[test]
    fn joins_sources_on_one_line() {
        assert_eq!(one_line(&Outer(Inner)), "cannot open the store: disk full");
    }
}
