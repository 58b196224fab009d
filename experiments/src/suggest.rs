//! "Did you mean" suggestions: the closest known name by edit distance, when
//! it is close enough to be a plausible typo.

/// Edit distance between two strings, counted in chars: insertions,
/// deletions, substitutions and swaps of two neighbours (the commonest typo)
/// each cost 1 (optimal string alignment distance, strsim's).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    strsim::osa_distance(a, b)
}

/// The candidate closest to `word`, if within a third of its length (at
/// least 1, at most 3 edits). Ties go to the earlier candidate.
pub(crate) fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).clamp(1, 3);
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        let d = edit_distance(&word.to_lowercase(), &candidate.to_lowercase());
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// `"; did you mean `x`?"`, or the empty string when nothing is close.
pub(crate) fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    match closest(word, candidates) {
        Some(c) => format!("; did you mean `{c}`?"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_counts_insertions_deletions_substitutions() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("wrkers", "workers"), 1);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("modle", "model"), 1);
    }

    #[test]
    fn suggests_only_close_names() {
        let names = ["workers", "ps", "model", "steps"];
        assert_eq!(closest("wrkers", names), Some("workers"));
        assert_eq!(closest("step", names), Some("steps"));
        assert_eq!(closest("bandwidth", names), None);
        assert_eq!(did_you_mean("modle", names), "; did you mean `model`?");
        assert_eq!(did_you_mean("zzz", names), "");
    }
}
