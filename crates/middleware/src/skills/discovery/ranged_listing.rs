//! Listing a large object-store source in key ranges at once, split where a previous catalog
//! says the keys are.
//!
//! A rescan of an object-store source learns every `SKILL.md`'s version tag from one recursive
//! listing, and stores page it: 1,000 keys per request on S3, one request after another, so 20,000
//! skills cost 20 round trips before anything else can happen (on every new thread of a warm
//! process, and at every cold start with a persisted catalog). The previous catalog knows roughly
//! where the keys are, so [`split_points`] cuts the key space into up to [`MAX_RANGES`] ranges of
//! similar size at known `SKILL.md` keys, and [`list_in_ranges`] lists them side by side with
//! [`Backend::list_files_between`]. The union of the ranges is exactly the whole listing whatever
//! changed since: the ranges are `(start, b1]`, `(b1, b2]`, …, `(bk, end)`, so a key added or
//! removed anywhere, a split key included, lands in exactly one range or in none. Only the
//! balance of the ranges depends on the previous catalog being right.

use crate::backend::{Backend, BackendError, FileListing, VirtualPath};

/// Most ranges listed at once.
pub(in crate::skills) const MAX_RANGES: usize = 8;
/// Fewest known skills per range: below that, one listing is as fast and costs fewer requests.
pub(in crate::skills) const SKILLS_PER_RANGE: usize = 250;

/// Split points for `known` (the distinct `SKILL.md` paths a previous catalog holds below one
/// source, in any order): none when one listing will do, else up to `MAX_RANGES - 1` of them,
/// sorted.
pub(in crate::skills) fn split_points(mut known: Vec<&VirtualPath>) -> Vec<VirtualPath> {
    let ranges = (known.len() / SKILLS_PER_RANGE).clamp(1, MAX_RANGES);
    if ranges == 1 {
        return Vec::new();
    }
    // `VirtualPath` orders by its string's bytes: the order stores list keys in.
    // Distinct paths and at least `SKILLS_PER_RANGE` per range: the points are distinct too.
    known.sort_unstable();
    (1..ranges)
        .map(|i| known[i * known.len() / ranges].clone())
        .collect()
}

/// Every file below `base`, listed as the ranges `splits` bounds, at once; sorted by path and
/// cut at `limit` (then `truncated`). `None` when the backend cannot list a range natively (the
/// caller lists `base` whole).
pub(in crate::skills) async fn list_in_ranges(
    backend: &dyn Backend,
    base: &VirtualPath,
    splits: &[VirtualPath],
    limit: usize,
) -> Option<Result<FileListing, BackendError>> {
    let bounds: Vec<(Option<&VirtualPath>, Option<&VirtualPath>)> = (0..=splits.len())
        .map(|i| (i.checked_sub(1).map(|j| &splits[j]), splits.get(i)))
        .collect();
    let listings = futures::future::join_all(
        bounds
            .iter()
            .map(|&(after, until)| backend.list_files_between(base, after, until, limit)),
    )
    .await;
    let mut merged = FileListing::default();
    for listing in listings {
        match listing? {
            Ok(part) => {
                merged.truncated |= part.truncated;
                merged.files.extend(part.files);
            }
            Err(e) => return Some(Err(e)),
        }
    }
    // The ranges are disjoint and in key order, each sorted: their concatenation is the sorted
    // whole listing.
    if merged.files.len() > limit {
        merged.files.truncate(limit);
        merged.truncated = true;
    }
    Some(Ok(merged))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn paths(n: usize) -> Vec<VirtualPath> {
        (0..n)
            .map(|i| VirtualPath::parse(&format!("/skills/s-{i:05}/SKILL.md")).unwrap())
            .collect()
    }

    #[test]
    fn small_libraries_are_listed_whole_and_large_ones_in_balanced_ranges() {
        let few = paths(SKILLS_PER_RANGE * 2 - 1);
        assert!(split_points(few.iter().collect()).is_empty());

        let many = paths(5_000);
        // Given in reverse: the points come out sorted and evenly spaced.
        let points = split_points(many.iter().rev().collect());
        assert_eq!(points.len(), MAX_RANGES - 1);
        assert!(points.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(points[0], many[5_000 / MAX_RANGES]);
    }
}
