//! Line diffs between two versions of a memory block, for the history page without JavaScript:
//! the longest common subsequence of their lines. Past [`MAX_CELLS`] comparisons (two very long
//! values) the diff is the whole old value removed and the new one added, so a page never costs
//! more than that. This module must never allocate in proportion to more than [`MAX_CELLS`].

/// Most line pairs compared (the LCS table's cells).
const MAX_CELLS: usize = 1_000_000;

/// One line of a diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Line<'a> {
    /// In both versions.
    Same(&'a str),
    /// Only in the older one.
    Removed(&'a str),
    /// Only in the newer one.
    Added(&'a str),
}

/// The lines of `new` against `old`, in order.
pub(crate) fn lines<'a>(old: &'a str, new: &'a str) -> Vec<Line<'a>> {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let cells = (a.len() + 1).saturating_mul(b.len() + 1);
    if cells > MAX_CELLS {
        return a
            .iter()
            .map(|l| Line::Removed(l))
            .chain(b.iter().map(|l| Line::Added(l)))
            .collect();
    }
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let width = b.len() + 1;
    let mut lcs = vec![0u32; cells];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i * width + j] = if a[i] == b[j] {
                lcs[(i + 1) * width + j + 1] + 1
            } else {
                lcs[(i + 1) * width + j].max(lcs[i * width + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(a.len() + b.len());
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            out.push(Line::Same(a[i]));
            i += 1;
            j += 1;
        } else if lcs[(i + 1) * width + j] >= lcs[i * width + j + 1] {
            out.push(Line::Removed(a[i]));
            i += 1;
        } else {
            out.push(Line::Added(b[j]));
            j += 1;
        }
    }
    out.extend(a[i..].iter().map(|l| Line::Removed(l)));
    out.extend(b[j..].iter().map(|l| Line::Added(l)));
    out
}

#[cfg(test)]
mod tests {
    use super::Line::{Added, Removed, Same};
    use super::lines;

    #[test]
    fn lines_are_kept_removed_or_added() {
        assert_eq!(
            lines("a\nb\nc", "a\nx\nc\nd"),
            vec![Same("a"), Removed("b"), Added("x"), Same("c"), Added("d")]
        );
        assert_eq!(lines("", "new"), vec![Added("new")]);
        assert_eq!(lines("old", ""), vec![Removed("old")]);
        assert_eq!(lines("same", "same"), vec![Same("same")]);
    }

    #[test]
    fn huge_values_are_replaced_whole() {
        let old = "x\n".repeat(1500);
        let new = "y\n".repeat(1500);
        let diff = lines(&old, &new);
        assert_eq!(diff.len(), 3000);
        assert!(matches!(diff[0], Removed("x")) && matches!(diff[2999], Added("y")));
    }
}
