//! `Backend::list_files_between`: a store either cannot list a key range (`None`, every time) or
//! lists exactly the files of the range, so that ranges split anywhere, at keys that exist or not,
//! add up to the whole listing, each file once.

use trellis_backend::VirtualPath;

use super::{Target, put};

pub(super) async fn key_ranges_add_up_to_the_whole_listing(t: &Target) {
    for rel in [
        "ranges/a/SKILL.md",
        "ranges/a/notes.md",
        "ranges/a-b/SKILL.md",
        "ranges/b/SKILL.md",
        "ranges/b/z/deep.md",
        "ranges/c/SKILL.md",
        // Beside the base, sorting before it ('-' < '/'): never part of its listing.
        "ranges-other/SKILL.md",
    ] {
        put(t, rel, rel.to_owned()).await;
    }
    let base = t.path("ranges");
    let whole = t.backend.list_files(&base, usize::MAX).await.unwrap();
    assert_eq!(whole.files.len(), 6);
    let Some(all) = t.backend.list_files_between(&base, None, None, usize::MAX).await else {
        // Not supported: then never, for any range.
        let at = t.path("ranges/b/SKILL.md");
        assert!(
            t.backend
                .list_files_between(&base, Some(&at), None, 10)
                .await
                .is_none()
        );
        return;
    };
    assert_eq!(all.unwrap(), whole, "one unbounded range is the whole listing");

    let cuts = [
        vec!["ranges/a/SKILL.md", "ranges/b/SKILL.md"],
        // Keys that do not exist, and one before every key.
        vec!["ranges/0", "ranges/a/zzz", "ranges/b/z/deep.md"],
    ];
    for cut in cuts {
        let points: Vec<VirtualPath> = cut.iter().map(|c| t.path(c)).collect();
        let mut union = Vec::new();
        for i in 0..=points.len() {
            let after = i.checked_sub(1).map(|j| &points[j]);
            let until = points.get(i);
            let part = t
                .backend
                .list_files_between(&base, after, until, usize::MAX)
                .await
                .expect("a store that lists one range lists every range")
                .unwrap();
            assert!(!part.truncated);
            assert!(part.files.windows(2).all(|w| w[0].path < w[1].path), "sorted");
            for f in &part.files {
                assert!(
                    after.is_none_or(|a| f.path.as_str() > a.as_str()),
                    "{} after {after:?}",
                    f.path
                );
                assert!(
                    until.is_none_or(|u| f.path.as_str() <= u.as_str()),
                    "{} until {until:?}",
                    f.path
                );
            }
            union.extend(part.files);
        }
        assert_eq!(
            union, whole.files,
            "the ranges {cut:?} add up to the whole listing"
        );
    }

    let capped = t
        .backend
        .list_files_between(&base, None, None, 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((capped.files.len(), capped.truncated), (2, true));
}
