//! Dates named in a question: "on 14 January 2023", "before March 2023", "after 2023-02-01",
//! "in January 2023". [`date_in_query`] finds the first such expression and turns it into a time
//! range (UTC days and months), so search can keep to passages of that time (a passage's time is
//! its `created_at`, which an `occurred_at` in its metadata sets) and search the rest of the
//! question's words.
//!
//! It must never invent a range from a bare number ("2023 goals" names no time) and never fail:
//! text without a well-formed date (a 31 February) is simply not a date.

use chrono::{DateTime, Months, NaiveDate, TimeZone, Utc};

/// A time range read from a question, and where it was in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryDate {
    /// At or after (inclusive); `None` is open.
    pub from: Option<DateTime<Utc>>,
    /// Before (exclusive); `None` is open.
    pub to: Option<DateTime<Utc>>,
    /// The question without the date expression (and its preposition), spaces tidied.
    pub rest: String,
}

const MONTHS: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// The month (1..=12) a word names: full names, and three-letter abbreviations (and "sept")
/// except "may"'s, which is the full name.
fn month(word: &str) -> Option<u32> {
    let w = word.trim_end_matches('.').to_lowercase();
    if w == "sept" {
        return Some(9);
    }
    MONTHS
        .iter()
        .position(|m| *m == w || (w.len() == 3 && m.starts_with(&w)))
        .map(|i| i as u32 + 1)
}

/// A day of the month: `14`, `14th`, `1st`, `2nd`, `3rd`.
fn day(word: &str) -> Option<u32> {
    let w = word.to_lowercase();
    let digits = w
        .strip_suffix("st")
        .or_else(|| w.strip_suffix("nd"))
        .or_else(|| w.strip_suffix("rd"))
        .or_else(|| w.strip_suffix("th"))
        .unwrap_or(&w);
    if digits.is_empty() || digits.len() > 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|d| (1..=31).contains(d))
}

/// A four-digit year from 1000 to 9999.
fn year(word: &str) -> Option<i32> {
    if word.len() != 4 || !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse().ok().filter(|y| *y >= 1000)
}

fn midnight(d: NaiveDate) -> DateTime<Utc> {
    Utc.from_utc_datetime(&d.and_hms_opt(0, 0, 0).unwrap_or_default())
}

/// What a run of words starting at `i` names: (first day, first day after, words used).
fn period(words: &[&str], i: usize) -> Option<(NaiveDate, NaiveDate, usize)> {
    let w = |k: usize| words.get(i + k).copied().unwrap_or("");
    let next_day = |d: NaiveDate| d.succ_opt().map(|n| (d, n));
    // 2023-01-14
    if let Ok(d) = NaiveDate::parse_from_str(w(0), "%Y-%m-%d") {
        return next_day(d).map(|(a, b)| (a, b, 1));
    }
    // 14 January 2023
    if let (Some(d), Some(m), Some(y)) = (day(w(0)), month(w(1)), year(w(2))) {
        let date = NaiveDate::from_ymd_opt(y, m, d)?;
        return next_day(date).map(|(a, b)| (a, b, 3));
    }
    if let Some(m) = month(w(0)) {
        // January 14 2023, January 14, 2023
        if let (Some(d), Some(y)) = (day(w(1)), year(w(2))) {
            let date = NaiveDate::from_ymd_opt(y, m, d)?;
            return next_day(date).map(|(a, b)| (a, b, 3));
        }
        // January 2023
        if let Some(y) = year(w(1)) {
            let first = NaiveDate::from_ymd_opt(y, m, 1)?;
            let after = first.checked_add_months(Months::new(1))?;
            return Some((first, after, 2));
        }
    }
    None
}

/// The first date expression of `query` as a range; `None` when it names none.
/// "before X" ends at X's start, "after X" starts after X's end, "since X" starts at X's start,
/// "until X" ends after X; otherwise (with "on", "in", "during" or nothing) the range is X.
pub fn date_in_query(query: &str) -> Option<QueryDate> {
    let words: Vec<&str> = query
        .split(|c: char| c.is_whitespace() || c == ',' || c == '?' || c == '!' || c == ';')
        .filter(|w| !w.is_empty())
        .collect();
    let mut skip_to = 0;
    for i in 0..words.len() {
        if i < skip_to {
            continue;
        }
        let Some((first, after, used)) = period(&words, i) else {
            // A malformed day ("31 February 2023") is no date, nor is its month.
            if day(words[i]).is_some() && words.get(i + 1).is_some_and(|w| month(w).is_some()) {
                skip_to = i + 3;
            }
            continue;
        };
        let (start, end) = (midnight(first), midnight(after));
        let prep = i
            .checked_sub(1)
            .and_then(|p| words.get(p))
            .map(|w| w.to_lowercase());
        let (from, to, drop_prep) = match prep.as_deref() {
            Some("before") => (None, Some(start), true),
            Some("after") => (Some(end), None, true),
            Some("since") => (Some(start), None, true),
            Some("until" | "till") => (None, Some(end), true),
            Some("on" | "in" | "during") => (Some(start), Some(end), true),
            _ => (Some(start), Some(end), false),
        };
        let cut = if drop_prep { i - 1 } else { i };
        let rest: Vec<&str> = words[..cut]
            .iter()
            .chain(&words[i + used..])
            .copied()
            .collect();
        // Keep a trailing '.' of the date out of the rest; the date's own words are gone.
        let rest = rest.join(" ").trim_end_matches('.').trim().to_owned();
        return Some(QueryDate { from, to, rest });
    }
    None
}

#[cfg(test)]
mod tests {
    //! Unit and property tests of date reading.

    use super::*;
    use proptest::prelude::*;

    fn at(y: i32, m: u32, d: u32) -> DateTime<Utc> {
        midnight(NaiveDate::from_ymd_opt(y, m, d).unwrap())
    }

    #[test]
    fn a_day_in_several_spellings() {
        for q in [
            "What did Ana say on 14 January 2023?",
            "What did Ana say on January 14, 2023?",
            "What did Ana say on 2023-01-14?",
            "What did Ana say on 14th Jan 2023?",
        ] {
            let d = date_in_query(q).unwrap();
            assert_eq!(d.from, Some(at(2023, 1, 14)), "{q}");
            assert_eq!(d.to, Some(at(2023, 1, 15)), "{q}");
            assert_eq!(d.rest, "What did Ana say", "{q}");
        }
    }

    #[test]
    fn months_and_prepositions() {
        let d = date_in_query("trips in March 2024").unwrap();
        assert_eq!((d.from, d.to), (Some(at(2024, 3, 1)), Some(at(2024, 4, 1))));
        assert_eq!(d.rest, "trips");
        let d = date_in_query("what happened before December 2023").unwrap();
        assert_eq!((d.from, d.to), (None, Some(at(2023, 12, 1))));
        let d = date_in_query("what happened after December 2023").unwrap();
        assert_eq!((d.from, d.to), (Some(at(2024, 1, 1)), None));
        let d = date_in_query("news since 2 May 2023").unwrap();
        assert_eq!((d.from, d.to), (Some(at(2023, 5, 2)), None));
        let d = date_in_query("news until 2 May 2023").unwrap();
        assert_eq!((d.from, d.to), (None, Some(at(2023, 5, 3))));
    }

    #[test]
    fn no_date_no_range() {
        for q in [
            "2023 goals",
            "may I ask about 12 apples",
            "31 February 2023 party",
            "the 14 January meeting",
            "",
        ] {
            assert_eq!(date_in_query(q), None, "{q}");
        }
    }

    proptest! {
        /// Any text is read without panicking, and a range read is never inverted.
        #[test]
        fn never_panics_and_ranges_are_ordered(q in "\\PC{0,80}") {
            if let Some(d) = date_in_query(&q)
                && let (Some(from), Some(to)) = (d.from, d.to)
            {
                prop_assert!(from < to);
            }
        }

        /// Every valid day is read back as itself.
        #[test]
        fn every_day_reads_back(y in 1000i32..9999, m in 1u32..=12, d in 1u32..=28) {
            let q = format!("what was said on {d} {} {y}", MONTHS[m as usize - 1]);
            let got = date_in_query(&q).unwrap();
            prop_assert_eq!(got.from, Some(at(y, m, d)));
            prop_assert_eq!(got.rest, "what was said");
        }
    }
}
