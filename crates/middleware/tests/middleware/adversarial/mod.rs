//! Adversarial inputs at scale and in skills: hostile discovery, file tools and prompt text.
//! `common` builds the hostile libraries.

mod common;
mod scale;
mod skills_discovery;
mod skills_file_tools;
mod skills_prompt;
