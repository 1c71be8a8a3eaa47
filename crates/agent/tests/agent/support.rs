//! What every test module of this binary shares: the guard for tests that need an emulator or an
//! external program, found through environment variables that `cargo xtask test` sets
//! (`TRELLIS_MCP_PYTHON`, `TRELLIS_LANGGRAPH_PYTHON`, `TRELLIS_S3_ENDPOINT`, …).
//!
//! When one is unset or empty, the test prints `skipped: <test> (set <VARS> or run `cargo xtask
//! test`)` and returns; with `TRELLIS_EMULATORS=required` (which xtask sets) it fails instead,
//! saying which variable is missing. The macros take the test's name from the function they are
//! written in.

/// The values of `vars`, or `None` after printing why `test` skips; panics instead when
/// `TRELLIS_EMULATORS=required`. Use [`require_env!`] in a test.
pub fn env_or_skip<const N: usize>(test: &str, vars: [&str; N]) -> Option<[String; N]> {
    let values = vars.map(|var| std::env::var(var).ok().filter(|value| !value.is_empty()));
    if values.iter().all(Option::is_some) {
        return Some(values.map(Option::unwrap_or_default));
    }
    let missing = vars
        .iter()
        .zip(&values)
        .filter(|(_, value)| value.is_none())
        .map(|(var, _)| *var)
        .collect::<Vec<_>>()
        .join(", ");
    if std::env::var("TRELLIS_EMULATORS").as_deref() == Ok("required") {
        panic!("{test}: {missing} is not set but TRELLIS_EMULATORS=required");
    }
    eprintln!("skipped: {test} (set {missing} or run `cargo xtask test`)");
    None
}

/// The name of the test function this is expanded in (an `async` test's body included).
macro_rules! test_name {
    () => {{
        fn here() {}
        let path = std::any::type_name_of_val(&here);
        let path = path.trim_end_matches("::here").trim_end_matches("::{{closure}}");
        path.rsplit("::").next().unwrap_or(path)
    }};
}

/// `let [endpoint, bucket] = require_env!("TRELLIS_S3_ENDPOINT", "TRELLIS_TEST_BUCKET");`: the
/// variables' values, or return from the test (see the module docs).
macro_rules! require_env {
    ($($var:literal),+ $(,)?) => {
        match $crate::support::env_or_skip($crate::support::test_name!(), [$($var),+]) {
            Some(values) => values,
            None => return,
        }
    };
}

/// `let python = skip_unless_python!();`: the Python interpreter with the MCP SDK and the OTLP
/// receiver's packages (`TRELLIS_MCP_PYTHON`), or return from the test.
macro_rules! skip_unless_python {
    () => {{
        let [python] = $crate::support::require_env!("TRELLIS_MCP_PYTHON");
        python
    }};
}

/// `let python = skip_unless_langgraph!();`: the Python interpreter with the LangGraph SDK
/// (`langgraph-sdk`, `TRELLIS_LANGGRAPH_PYTHON`), or return from the test.
macro_rules! skip_unless_langgraph {
    () => {{
        let [python] = $crate::support::require_env!("TRELLIS_LANGGRAPH_PYTHON");
        python
    }};
}

pub(crate) use {require_env, skip_unless_langgraph, skip_unless_python, test_name};
