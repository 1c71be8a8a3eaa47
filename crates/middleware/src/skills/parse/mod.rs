//! Reading one `SKILL.md`: the frontmatter (a bounded YAML subset with a fast path, scalars
//! keeping their text), the Agent Skills rules it is validated against, and the skill it becomes.

pub(crate) mod fastyaml;
pub mod frontmatter;
pub(crate) mod skill;
pub mod validate;
pub(crate) mod yaml_text;
