//! A small HTML writer for the console's server-rendered pages, built so that data can only
//! ever be text: markup goes in only as `&'static str` (written in this crate's source), and
//! every datum through [`Html::text`] or an [`Href`], which escape it. Links are built from fixed
//! path parts and percent-encoded segments. This module must never take markup from a `String`.

use std::fmt::Write as _;

/// A page being written.
#[derive(Debug, Default)]
pub(crate) struct Html(String);

/// `&`, `<`, `>`, `"` and `'` as character references: safe in text and quoted attributes.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

impl Html {
    /// Markup written in the source.
    pub(crate) fn raw(&mut self, markup: &'static str) -> &mut Self {
        self.0.push_str(markup);
        self
    }

    /// A datum, as text.
    pub(crate) fn text(&mut self, text: &str) -> &mut Self {
        self.0.push_str(&escape(text));
        self
    }

    /// `<tag>datum</tag>` for a fixed tag (with fixed attributes).
    pub(crate) fn el(&mut self, open: &'static str, text: &str, close: &'static str) -> &mut Self {
        self.raw(open).text(text).raw(close)
    }

    /// A table cell holding a datum.
    pub(crate) fn td(&mut self, text: &str) -> &mut Self {
        self.el("<td>", text, "</td>")
    }

    /// A header row of fixed names.
    pub(crate) fn head(&mut self, names: &[&'static str]) -> &mut Self {
        self.raw("<thead><tr>");
        for name in names {
            self.raw("<th scope=\"col\">").raw(name).raw("</th>");
        }
        self.raw("</tr></thead>")
    }

    /// A link to `href` showing `text`.
    pub(crate) fn link(&mut self, href: &Href, text: &str) -> &mut Self {
        self.raw("<a href=\"")
            .text(&href.0)
            .raw("\">")
            .text(text)
            .raw("</a>")
    }

    /// A table cell holding a link.
    pub(crate) fn td_link(&mut self, href: &Href, text: &str) -> &mut Self {
        self.raw("<td>").link(href, text).raw("</td>")
    }

    /// The page written so far.
    pub(crate) fn finish(self) -> String {
        self.0
    }
}

/// A same-origin path built from fixed parts and percent-encoded data.
#[derive(Debug, Clone)]
pub(crate) struct Href(String);

impl Href {
    /// A fixed path.
    pub(crate) fn new(path: &'static str) -> Self {
        Self(path.to_owned())
    }

    /// Appends a fixed part (`/blocks`).
    pub(crate) fn part(mut self, part: &'static str) -> Self {
        self.0.push_str(part);
        self
    }

    /// Appends `/` and a datum, percent-encoded (everything but unreserved characters).
    pub(crate) fn seg(mut self, segment: &str) -> Self {
        self.0.push('/');
        for byte in segment.bytes() {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
                self.0.push(char::from(byte));
            } else {
                let _ = write!(self.0, "%{byte:02X}");
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::{Href, Html, escape};

    #[test]
    fn data_is_escaped_everywhere() {
        assert_eq!(
            escape("<img src=x onerror=\"alert('1')\">&"),
            "&lt;img src=x onerror=&quot;alert(&#39;1&#39;)&quot;&gt;&amp;"
        );
        let mut html = Html::default();
        html.link(
            &Href::new("/console/agents").seg("a/b\"<x>").part("/blocks"),
            "<b>bold</b>",
        );
        assert_eq!(
            html.finish(),
            "<a href=\"/console/agents/a%2Fb%22%3Cx%3E/blocks\">&lt;b&gt;bold&lt;/b&gt;</a>"
        );
    }
}
