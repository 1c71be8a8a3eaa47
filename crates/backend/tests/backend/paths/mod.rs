//! Paths that try to leave a backend's root: hostile input strings and symlinks (`escapes`),
//! hostile names already in storage (`adversarial`), and the inputs fuzzing found
//! (`fuzz_regressions`).

mod adversarial;
mod escapes;
mod fuzz_regressions;
