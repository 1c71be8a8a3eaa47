//! What the model sees of the catalog: the budgeted skills section, the `search_skills` index,
//! and the messages that disclose or pin a skill.

pub(crate) mod activation;
pub mod render;
pub(crate) mod search;
