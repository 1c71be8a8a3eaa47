//! The rubric middleware: grading runs, the grader payload and its verdicts. `common` holds the
//! scripted grader.

mod common;
mod grading_runs;
mod payload;
mod verdicts;
