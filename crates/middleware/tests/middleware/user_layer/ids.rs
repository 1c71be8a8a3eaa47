//! User ids are untrusted: any string either is refused by type or names a home that reaches
//! nothing of another user's, whatever siblings by prefix or encodings an attacker tries.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

/// User ids an attacker would try, siblings by prefix (`ab` next to `a`), and anything at all.
fn user_id() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let pieces = prop::sample::select(vec![
        "..", ".", "/", "\\", "%2e", "%2F", "a", "b", "ab", "-", "_", "ü", "\u{FF0E}", " ", "\0", "users",
    ]);
    prop_oneof![
        prop::collection::vec(pieces, 1..5).prop_map(|v| v.concat()),
        "[ab][ab._-]{0,3}",
        any::<String>(),
    ]
}

fn extensions_for(id: &str) -> Extensions {
    let mut ext = Extensions::new();
    ext.insert(UserIdentity::new(id));
    ext
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    /// What one user's workspace holds is never reached through another id: an id that is not one
    /// safe segment is refused by type (naming it), and a valid other id sees nothing of it.
    #[test]
    fn a_users_files_are_never_reached_through_another_users_id(a in user_id(), b in user_id()) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let store = Arc::new(StateBackend::new());
            let homes = homes(&store);
            let valid = |id: &str| trellis_middleware::backend::ScopeId::user(id).is_ok();
            let secret = VirtualPath::parse("/agents/MEMORY.md").unwrap();
            match homes.resolve(&extensions_for(&a)) {
                Err(UserHomeError::InvalidUserId(e)) => {
                    assert!(!valid(&a), "refused a valid id {a:?}");
                    assert_eq!(e.id, a);
                    return;
                }
                Ok(None) => panic!("a user with UserSpaces always has a home"),
                Ok(Some(home)) => {
                    assert!(valid(&a), "accepted {a:?}");
                    home.backend
                        .write(&secret, "secret-of-a".into(), WriteMode::Overwrite)
                        .await
                        .unwrap();
                }
            }
            let stored = store.list_files(&VirtualPath::root(), 10).await.unwrap();
            let paths: Vec<&str> = stored.files.iter().map(|f| f.path.as_str()).collect();
            assert_eq!(paths, [format!("/users/{a}/agents/MEMORY.md")], "one segment below /users");
            match homes.resolve(&extensions_for(&b)) {
                Err(UserHomeError::InvalidUserId(e)) => assert!(!valid(&b) && e.id == b),
                Ok(None) => panic!("a user with UserSpaces always has a home"),
                Ok(Some(home)) if a == b => {
                    assert_eq!(home.backend.read_to_string(&secret).await.unwrap(), "secret-of-a");
                }
                Ok(Some(home)) => {
                    let theirs = home.backend.list_files(&VirtualPath::root(), 10).await.unwrap();
                    assert!(theirs.files.is_empty(), "{b:?} lists {a:?}'s files: {:?}", theirs.files);
                    assert!(home.backend.read(&secret, None).await.is_err(), "{b:?} reads {a:?}'s file");
                    let query = trellis_middleware::backend::GrepQuery::new("secret-of-a", VirtualPath::root());
                    let hits = home.backend.grep(&query).await;
                    assert!(hits.map(|h| h.matches.is_empty()).unwrap_or(true), "{b:?} greps {a:?}'s file");
                }
            }
        });
    }
}
