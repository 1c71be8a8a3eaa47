//! The grader's answer: [`GraderVerdict`], its JSON schema, and the checks it must pass.
//!
//! Two layers keep a hallucinated verdict out:
//!
//! 1. **Types.** Each criterion is a tagged union on `status`: a `passed` entry has no `gap` field, a
//!    `failed` entry must have one, and unknown fields are rejected, so "passed with a gap" and
//!    "failed without one" do not even parse.
//! 2. **Cross-field checks** ([`GraderVerdict::validate`]): the overall verdict must agree with the
//!    criteria, and once a grading run has fixed its criteria, every later verdict must account for
//!    exactly those.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::runtime::model::ResponseFormat;
use crate::tools::parameters_schema;

/// The name of the grader's structured-output format.
pub const VERDICT_FORMAT_NAME: &str = "grader_verdict";

/// What the grader may say about the work as a whole (the grader's vocabulary; compare
/// [`RubricResult`](super::RubricResult), what the middleware records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every criterion is met.
    Satisfied,
    /// At least one criterion is not met and the agent can fix it. The only verdict that sends the
    /// agent back to work.
    NeedsRevision,
    /// The rubric itself cannot be used (contradictory, unintelligible, or not checkable from a
    /// transcript). Not a judgement of the work.
    Failed,
}

impl Verdict {
    /// The `snake_case` name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Satisfied => "satisfied",
            Self::NeedsRevision => "needs_revision",
            Self::Failed => "failed",
        }
    }
}

/// The grader's judgement of one criterion: passed (no gap) or failed (gap required).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case", deny_unknown_fields)]
pub enum CriterionEval {
    /// The criterion is met.
    Passed {
        /// A short name for the criterion.
        name: String,
    },
    /// The criterion is not met.
    Failed {
        /// A short name for the criterion.
        name: String,
        /// What is missing or wrong, concretely enough for the agent to fix it.
        gap: String,
    },
}

impl CriterionEval {
    /// A passed criterion.
    pub fn passed(name: impl Into<String>) -> Self {
        Self::Passed { name: name.into() }
    }

    /// A failed criterion with its gap.
    pub fn failed(name: impl Into<String>, gap: impl Into<String>) -> Self {
        Self::Failed {
            name: name.into(),
            gap: gap.into(),
        }
    }

    /// The criterion's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Passed { name } | Self::Failed { name, .. } => name,
        }
    }

    /// True for a passed criterion.
    pub fn is_passed(&self) -> bool {
        matches!(self, Self::Passed { .. })
    }

    /// The gap of a failed criterion.
    pub fn gap(&self) -> Option<&str> {
        match self {
            Self::Passed { .. } => None,
            Self::Failed { gap, .. } => Some(gap),
        }
    }
}

/// The grader's structured answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraderVerdict {
    /// The overall verdict.
    pub result: Verdict,
    /// A short explanation of the verdict.
    pub explanation: String,
    /// One entry per criterion of the rubric.
    pub criteria: Vec<CriterionEval>,
}

/// Why a grader's answer was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerdictError {
    /// The answer does not match the schema.
    #[error("the verdict does not match the schema: {0}")]
    Schema(String),
    /// `satisfied`, but some criterion failed.
    #[error("the verdict is 'satisfied' but criterion {0:?} failed")]
    SatisfiedWithFailure(String),
    /// `needs_revision`, but no criterion failed: there is nothing to revise.
    #[error("the verdict is 'needs_revision' but no criterion failed, so there is nothing to revise")]
    RevisionWithoutFailure,
    /// `satisfied` or `needs_revision` without any criterion: the verdict cannot be checked.
    #[error("the verdict is {0:?} but judges no criterion")]
    NoCriteria(&'static str),
    /// Two entries share a name.
    #[error("criterion {0:?} is judged twice")]
    DuplicateCriterion(String),
    /// A criterion's name or gap is blank.
    #[error("a criterion has a blank name or gap")]
    Blank,
    /// The criteria differ from the ones fixed in the first round of the grading run.
    #[error("the criteria were fixed in the first round as [{expected}], but the verdict judges [{found}]")]
    CriteriaChanged {
        /// The fixed criteria.
        expected: String,
        /// The criteria judged.
        found: String,
    },
}

/// Names compare case-insensitively and with runs of whitespace collapsed.
fn normalize(name: &str) -> String {
    name.split_whitespace()
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

impl GraderVerdict {
    /// Parse a grader's structured output (schema check only; see [`GraderVerdict::validate`]).
    pub fn parse(value: Value) -> Result<Self, VerdictError> {
        serde_json::from_value(value).map_err(|e| VerdictError::Schema(e.to_string()))
    }

    /// Cross-field checks. `fixed` holds the criteria fixed earlier in the grading run (empty in its
    /// first round).
    ///
    /// * `satisfied` must have no failed criterion; `needs_revision` must have at least one.
    /// * Both must judge at least one criterion; names must be non-blank and distinct, gaps non-blank.
    /// * With fixed criteria, the verdict judges exactly those (names compared case-insensitively,
    ///   order free).
    /// * `failed` (the rubric is unusable) is exempt from the criteria checks.
    pub fn validate(&self, fixed: &[String]) -> Result<(), VerdictError> {
        if self.result == Verdict::Failed {
            return Ok(());
        }
        if self.criteria.is_empty() {
            return Err(VerdictError::NoCriteria(self.result.as_str()));
        }
        let mut seen = std::collections::HashSet::new();
        for c in &self.criteria {
            if c.name().trim().is_empty() || c.gap().is_some_and(|g| g.trim().is_empty()) {
                return Err(VerdictError::Blank);
            }
            if !seen.insert(normalize(c.name())) {
                return Err(VerdictError::DuplicateCriterion(c.name().to_owned()));
            }
        }
        match self.result {
            Verdict::Satisfied => {
                if let Some(failed) = self.criteria.iter().find(|c| !c.is_passed()) {
                    return Err(VerdictError::SatisfiedWithFailure(failed.name().to_owned()));
                }
            }
            Verdict::NeedsRevision if self.criteria.iter().all(CriterionEval::is_passed) => {
                return Err(VerdictError::RevisionWithoutFailure);
            }
            _ => {}
        }
        if !fixed.is_empty() {
            let expected: std::collections::HashSet<String> = fixed.iter().map(|n| normalize(n)).collect();
            if expected != seen {
                return Err(VerdictError::CriteriaChanged {
                    expected: fixed.join(", "),
                    found: self
                        .criteria
                        .iter()
                        .map(CriterionEval::name)
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
        }
        Ok(())
    }

    /// The failed criteria, in order.
    pub fn failed_criteria(&self) -> impl Iterator<Item = &CriterionEval> {
        self.criteria.iter().filter(|c| !c.is_passed())
    }
}

/// The structured-output format the grader is asked for: the schema of [`GraderVerdict`], with
/// subschemas inlined, `oneOf` written as the equivalent `anyOf` and `const` as a one-value `enum`
/// (the variants are told apart by their `status`, so nothing is lost), which strict structured
/// output modes accept.
pub fn verdict_format() -> ResponseFormat {
    let mut schema = parameters_schema::<GraderVerdict>();
    strict_compatible(&mut schema);
    ResponseFormat {
        name: VERDICT_FORMAT_NAME.to_owned(),
        // Keys re-inserted above go back in sorted place.
        schema: crate::tools::canonical::canonical(schema),
        strict: true,
    }
}

fn strict_compatible(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(variants) = map.remove("oneOf") {
                map.insert("anyOf".to_owned(), variants);
            }
            if let Some(constant) = map.remove("const") {
                map.insert("enum".to_owned(), Value::Array(vec![constant]));
            }
            map.values_mut().for_each(strict_compatible);
        }
        Value::Array(items) => items.iter_mut().for_each(strict_compatible),
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tagged_union_rejects_gap_on_pass_and_pass_without_tag() {
        let ok = json!({"status": "failed", "name": "a", "gap": "b"});
        assert!(serde_json::from_value::<CriterionEval>(ok).is_ok());
        for bad in [
            json!({"status": "passed", "name": "a", "gap": "stray"}),
            json!({"status": "failed", "name": "a"}),
            json!({"name": "a", "passed": true}),
            json!({"status": "maybe", "name": "a"}),
        ] {
            assert!(
                serde_json::from_value::<CriterionEval>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn schema_is_strict_friendly() {
        let f = verdict_format();
        let text = f.schema.to_string();
        assert!(!text.contains("oneOf") && !text.contains("\"const\"") && !text.contains("$ref"));
        assert_eq!(f.schema["additionalProperties"], false);
        assert!(text.contains("\"gap\""));
    }
}
