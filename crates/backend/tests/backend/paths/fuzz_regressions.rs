//! Regressions found while fuzzing `VirtualPath` (fuzz target `path`, see docs/fuzzing.md). The
//! inputs are also kept under `fuzz/regressions/path/`.

#![allow(clippy::unwrap_used)]

use trellis_backend::path::MAX_PATH_BYTES;
use trellis_backend::{PathError, VirtualPath};

/// `count` segments of 255 bytes, `/`-separated, without a leading `/`.
fn long_relative(count: usize) -> String {
    vec!["s".repeat(255); count].join("/")
}

#[test]
fn a_relative_input_at_the_limit_does_not_become_a_path_over_it() {
    // 4,096 bytes without a leading `/` parsed to a 4,097-byte path, which then did not re-parse.
    let input = format!("{}/{}", vec!["s".repeat(200); 20].join("/"), "t".repeat(76));
    assert_eq!(input.len(), MAX_PATH_BYTES);
    assert_eq!(VirtualPath::parse(&input), Err(PathError::TooLong));
    // The same path written with its `/` is 4,097 bytes: refused as before.
    assert_eq!(VirtualPath::parse(&format!("/{input}")), Err(PathError::TooLong));
    // One byte shorter fits, and re-parses to itself.
    let fits = VirtualPath::parse(&input[..input.len() - 1]).unwrap();
    assert_eq!(fits.as_str().len(), MAX_PATH_BYTES);
    assert_eq!(VirtualPath::parse(fits.as_str()), Ok(fits));
}

#[test]
fn join_refuses_a_result_over_the_limit() {
    // `join` checked the segment but not the total: a 4,041-byte directory plus a 255-byte name gave
    // a 4,297-byte path that no longer parsed.
    let dir = VirtualPath::parse(&format!("{}/{}", long_relative(15), "t".repeat(200))).unwrap();
    assert_eq!(dir.as_str().len(), 4041);
    assert_eq!(dir.join(&"x".repeat(255)), Err(PathError::TooLong));
    assert_eq!(dir.join_relative(&"x".repeat(255)), Err(PathError::TooLong));
    let name = "x".repeat(MAX_PATH_BYTES - 4041 - 1);
    let joined = dir.join(&name).unwrap();
    assert_eq!(joined.as_str().len(), MAX_PATH_BYTES);
    assert_eq!(VirtualPath::parse(joined.as_str()), Ok(joined));
}

#[test]
fn relative_to_joins_back_even_for_names_that_look_like_host_paths() {
    // `/~x` and `/c:x` are valid paths, but their relative forms `~x` and `c:x` were refused by
    // `join_relative` as host paths, so `relative_to` did not round-trip.
    let root = VirtualPath::root();
    for path in ["/~x", "/~/x", "/c:x", "/C:/x/y", "/~#!"] {
        let path = VirtualPath::parse(path).unwrap();
        let relative = path.relative_to(&root).unwrap();
        assert_eq!(root.join_relative(relative).as_ref(), Ok(&path), "{relative:?}");
        let base = VirtualPath::parse("/base").unwrap();
        let joined = base.join_relative(relative).unwrap();
        assert_eq!(joined.rebase(&base, &root), Some(path));
    }
    // Bare input is still refused: only below a base is `~` a name.
    assert_eq!(VirtualPath::parse("~/x"), Err(PathError::HostPath));
    assert_eq!(VirtualPath::parse("c:x"), Err(PathError::HostPath));
    // Whitespace-only input stays `Empty`, as documented.
    assert_eq!(root.join_relative(" "), Err(PathError::Empty));
    // Every other check still applies to the joined part.
    assert_eq!(root.join_relative("~/../x"), Err(PathError::Traversal));
    assert_eq!(root.join_relative("c:\\x"), Err(PathError::Backslash));
}
