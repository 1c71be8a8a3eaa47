//! `/skill-name text`: a leading skill name that pins the skill for the next model call, in
//! `trellis run "/meeting-prep Acme tomorrow"` and in `trellis chat`.
//!
//! The rule, for a task or a chat line:
//!
//! | the text starts with | it means |
//! |---|---|
//! | `/NAME` and NAME is a skill of the catalog | pin NAME ([`PIN_SKILLS`]); the rest, trimmed, is the task |
//! | `/NAME`, NAME a word (no further `/`) and no such skill | an error, [`PinError::UnknownSkill`], naming the closest skills |
//! | `//` | no pin: the text without its first `/` is the task (to send a leading slash) |
//! | `/` followed by a path (`/tmp/x`), by a space, or nothing | no pin: the text as it is |
//!
//! An unknown name is refused rather than passed on, so a mistyped skill never reaches the model as
//! a question about a slash word. Which skill names exist is the catalog of the run's skill
//! sources (and, with `--user`, that user's personal skills).
//!
//! A pin is thread state: the [`PIN_SKILLS`] slot is set on this run of this thread, and the
//! skills middleware adds the pinned skill's body before the next model call, once per thread.
//!
//! [`PIN_SKILLS`]: trellis_middleware::skills::PIN_SKILLS

use trellis_middleware::skills::DEFAULT_PERSONAL_SKILLS_DIR;
use trellis_middleware::skills::{DiscoveryOptions, SkillCatalog, SkillSource, discover};

use crate::cli::mounts::Mounts;

/// How many close names an [`PinError::UnknownSkill`] lists at most.
const CLOSE_NAMES: usize = 5;

/// What a leading `/` of a task means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leading {
    /// Pin `skill`; `rest` is the task (may be empty).
    Pin {
        /// The skill's name.
        skill: String,
        /// The text after the name, trimmed.
        rest: String,
    },
    /// No pin: the task as it goes to the model.
    Plain(String),
}

/// A leading `/NAME` that names no skill.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    /// No skill has this name.
    #[error("{}", unknown_message(.name, .close))]
    UnknownSkill {
        /// The name after the `/`.
        name: String,
        /// The closest skill names, closest first (may be empty).
        close: Vec<String>,
    },
}

fn unknown_message(name: &str, close: &[String]) -> String {
    let mut text = format!("there is no skill named {name:?}");
    if close.is_empty() {
        text.push_str(" (`trellis skills list SOURCE` lists them)");
    } else {
        text.push_str(&format!("; did you mean {}?", close.join(", ")));
    }
    text.push_str(" Start the text with // to send a leading / as it is.");
    text
}

/// The word after a leading `/`, when the text starts with one that could name a skill.
pub fn leading_word(text: &str) -> Option<(&str, &str)> {
    let after = text.strip_prefix('/')?;
    let end = after.find(char::is_whitespace).unwrap_or(after.len());
    let (word, rest) = after.split_at(end);
    (!word.is_empty() && !word.contains('/')).then_some((word, rest.trim()))
}

/// Read a leading `/NAME` of `text` against the skills of `catalog` (see the module docs).
pub fn parse(text: &str, catalog: &SkillCatalog) -> Result<Leading, PinError> {
    if let Some(escaped) = text.strip_prefix("//") {
        return Ok(Leading::Plain(format!("/{escaped}")));
    }
    let Some((word, rest)) = leading_word(text) else {
        return Ok(Leading::Plain(text.to_owned()));
    };
    if catalog.get(word).is_some() {
        return Ok(Leading::Pin {
            skill: word.to_owned(),
            rest: rest.to_owned(),
        });
    }
    Err(PinError::UnknownSkill {
        name: word.to_owned(),
        close: close_names(word, catalog.skills().iter().map(|s| s.name.as_str())),
    })
}

/// The names among `names` close to `word` (by Jaro-Winkler similarity, or containing it),
/// closest first, at most `CLOSE_NAMES` (5).
pub fn close_names<'a>(word: &str, names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let word = word.to_lowercase();
    let mut scored: Vec<(f64, &str)> = names
        .into_iter()
        .filter_map(|name| {
            let similarity = strsim::jaro_winkler(&word, &name.to_lowercase());
            let contains = word.len() >= 3 && name.contains(word.as_str());
            (similarity >= 0.8 || contains).then_some((similarity, name))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(CLOSE_NAMES)
        .map(|(_, n)| n.to_owned())
        .collect()
}

/// The skills a pin may name in `ws`: its skill sources, and with a user their personal skills
/// (which win over a shared skill of the same name, as in the agent).
pub async fn catalog(ws: &Mounts) -> SkillCatalog {
    let mut sources = ws.skills.clone();
    if let Some(files) = &ws.user_files
        && let Ok(personal) = SkillSource::labeled(
            files.clone(),
            &format!("/{DEFAULT_PERSONAL_SKILLS_DIR}"),
            "personal",
        )
    {
        sources.push(personal);
    }
    discover(&sources, &DiscoveryOptions::default()).await.catalog
}

/// A catalog of skills with these names (for unit tests).
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn test_catalog(names: &[&str]) -> SkillCatalog {
    use trellis_middleware::backend::VirtualPath;
    use trellis_middleware::skills::{MetadataMap, SkillMetadata};
    let skills = names
        .iter()
        .map(|n| SkillMetadata {
            name: (*n).to_owned(),
            description: format!("{n} things"),
            path: VirtualPath::parse(&format!("/skills/{n}/SKILL.md")).unwrap(),
            license: None,
            compatibility: None,
            metadata: MetadataMap::default(),
            allowed_tools: Vec::new(),
            include_tools: Vec::new(),
            source: 0,
            version: None,
        })
        .collect();
    SkillCatalog::new(Vec::new(), skills, Vec::new())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::test_catalog as catalog;
    use super::*;

    #[test]
    fn a_known_name_pins_and_the_rest_is_the_task() {
        let c = catalog(&["meeting-prep", "crm"]);
        assert_eq!(
            parse("/meeting-prep  Acme tomorrow ", &c),
            Ok(Leading::Pin {
                skill: "meeting-prep".into(),
                rest: "Acme tomorrow".into()
            })
        );
        assert_eq!(
            parse("/crm", &c),
            Ok(Leading::Pin {
                skill: "crm".into(),
                rest: String::new()
            })
        );
    }

    #[test]
    fn paths_plain_text_and_the_escape_pass_through() {
        let c = catalog(&["crm"]);
        for text in ["/tmp/notes is full", "no slash", "/", "/ spaced", ""] {
            assert_eq!(parse(text, &c), Ok(Leading::Plain(text.into())), "{text:?}");
        }
        assert_eq!(
            parse("//crm is a word", &c),
            Ok(Leading::Plain("/crm is a word".into()))
        );
    }

    #[test]
    fn an_unknown_name_is_an_error_naming_the_closest_skills() {
        let c = catalog(&["meeting-prep", "meeting-notes", "crm", "expenses"]);
        let Err(err) = parse("/meting-prep Acme", &c) else {
            panic!("unknown")
        };
        let PinError::UnknownSkill { name, close } = &err;
        assert_eq!(name, "meting-prep");
        assert_eq!(close.first().map(String::as_str), Some("meeting-prep"));
        assert!(!close.contains(&"crm".to_owned()), "{close:?}");
        let text = err.to_string();
        assert!(text.contains("did you mean meeting-prep"), "{text}");
        assert!(text.contains("//"), "{text}");
        let Err(err) = parse("/zzz", &c) else {
            panic!("unknown")
        };
        assert!(err.to_string().contains("skills list"), "{err}");
    }
}
