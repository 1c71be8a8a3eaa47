//! Approvals on the command line: which tools ask (`--ask`), which calls are approved without
//! asking (`--approve`), decisions from a file (`--decisions`), and the terminal prompt.
//!
//! For each call a run stops at, in order: a decision from `--decisions` wins; else `--approve`
//! approves it when it names its tool (or is `all`); else, on a terminal, the person is asked; else
//! the call stays undecided and the run ends with [`EXIT_WAITING`] and the `trellis resume`
//! command that continues it.
//!
//! The prompt, on stderr:
//!
//! | answer | decision |
//! |---|---|
//! | `y` | approve |
//! | `n` | reject; a reason is asked for (may be left empty) and given to the model |
//! | `e` | edit: new arguments as one line of JSON (an object) |
//! | `r` | respond: a line of text that becomes the call's result |
//!
//! Only the answers the call accepts are offered. End of input leaves the call undecided. Where
//! the terminal can edit a line (`trellis chat`), `e` starts the answer with the call's current
//! arguments.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::Path;
use std::str::FromStr;
use trellis_middleware::tools::canonical::Sorted;

use anyhow::{Result, bail};
use trellis_middleware::approvals::{Ask, InterruptOn};
use trellis_middleware::runtime::interrupt::{ApprovalRequest, Decision, DecisionKind, Decisions, Interrupt};
use trellis_middleware::untrusted::escape_controls as safe;

/// The exit status of a run that stopped to wait for decisions nobody could give.
pub const EXIT_WAITING: u8 = 3;

/// The tools `trellis run` asks about unless `--ask` says otherwise.
pub const DEFAULT_ASK: &str = "execute,write_file,edit_file";

/// The approval policy of `--ask TOOL,...` (`none`: ask about nothing).
pub fn gate(ask: &[String]) -> Result<Option<InterruptOn>> {
    let names = split_names(ask);
    if names.iter().any(|n| n == "none") {
        if names.len() > 1 {
            bail!("--ask none cannot be combined with tool names");
        }
        return Ok(None);
    }
    if names.is_empty() {
        return Ok(None);
    }
    Ok(Some(names.into_iter().fold(InterruptOn::new(), |gate, tool| {
        gate.tool(tool, Ask::Always)
    })))
}

fn split_names(values: &[String]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `--approve`: which asked-about calls are approved without asking.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ApproveRule {
    /// Every call.
    All,
    /// None (the default): ask on a terminal, else stop.
    #[default]
    None,
    /// Calls of these tools.
    Tools(BTreeSet<String>),
}

impl FromStr for ApproveRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "all" => Ok(Self::All),
            "none" => Ok(Self::None),
            list => {
                let tools: BTreeSet<String> = split_names(&[list.to_owned()]).into_iter().collect();
                if tools.is_empty() || tools.contains("all") || tools.contains("none") {
                    return Err("use all, none, or a comma-separated list of tool names".into());
                }
                Ok(Self::Tools(tools))
            }
        }
    }
}

impl ApproveRule {
    fn approves(&self, request: &ApprovalRequest) -> bool {
        let approvable = request.allowed.contains(&DecisionKind::Approve);
        approvable
            && match self {
                Self::All => true,
                Self::None => false,
                Self::Tools(tools) => tools.contains(&request.tool),
            }
    }
}

/// Asks a person about one call.
pub trait Prompter {
    /// The decision, or `None` when no answer can be had (end of input).
    fn decide(&mut self, request: &ApprovalRequest, index: usize, total: usize) -> Result<Option<Decision>>;
}

/// How the calls of an interrupt were decided.
#[derive(Debug)]
pub enum Outcome {
    /// Every call has a decision.
    Decided(Decisions),
    /// These calls have none.
    Waiting(Vec<String>),
}

/// Decide every request of `interrupt` (see the module docs for the order).
pub fn decide(
    interrupt: &Interrupt,
    rule: &ApproveRule,
    given: Option<&Decisions>,
    mut prompter: Option<&mut dyn Prompter>,
) -> Result<Outcome> {
    let mut decisions = Decisions::new();
    let mut waiting = Vec::new();
    let total = interrupt.requests.len();
    for (index, request) in interrupt.requests.iter().enumerate() {
        let decision = if let Some(d) = given.and_then(|g| g.get(&request.id)) {
            Some(d.clone())
        } else if rule.approves(request) {
            Some(Decision::Approve)
        } else if let Some(p) = prompter.as_deref_mut() {
            p.decide(request, index, total)?
        } else {
            None
        };
        match decision {
            Some(d) => decisions.insert(request.id.clone(), d),
            None => waiting.push(request.id.clone()),
        }
    }
    Ok(if waiting.is_empty() {
        Outcome::Decided(decisions)
    } else {
        Outcome::Waiting(waiting)
    })
}

/// Where the prompt asks: a question and a line of answer at a time. [`LinePrompter`] asks on a
/// reader and a writer; `trellis chat` asks through its line editor, where `e` starts the answer
/// with the call's arguments to edit.
pub trait Asker {
    /// Show a line of text.
    fn say(&mut self, text: &str) -> Result<()>;
    /// Ask `question`; the answer starts as `initial` where the terminal lets it be edited (else
    /// `initial` is ignored). The answer is trimmed; `None` at end of input (or when the person
    /// gave up on the question, as with Ctrl-C in the chat).
    fn ask(&mut self, question: &str, initial: &str) -> Result<Option<String>>;
}

/// Every [`Asker`] asks about calls the same way (the table of the module docs).
impl<A: Asker> Prompter for A {
    fn decide(&mut self, request: &ApprovalRequest, index: usize, total: usize) -> Result<Option<Decision>> {
        ask_decision(self, request, index, total)
    }
}

/// The prompt on a terminal: questions to `out`, answers from `input`.
#[derive(Debug)]
pub struct LinePrompter<R, W> {
    input: R,
    out: W,
}

impl<R: BufRead, W: Write> LinePrompter<R, W> {
    /// Ask on `out`, read answers from `input`.
    pub fn new(input: R, out: W) -> Self {
        Self { input, out }
    }
}

impl<R: BufRead, W: Write> Asker for LinePrompter<R, W> {
    fn say(&mut self, text: &str) -> Result<()> {
        writeln!(self.out, "{text}")?;
        Ok(())
    }

    fn ask(&mut self, question: &str, _initial: &str) -> Result<Option<String>> {
        write!(self.out, "{question}")?;
        self.out.flush()?;
        let mut line = String::new();
        if self.input.read_line(&mut line)? == 0 {
            writeln!(self.out)?;
            return Ok(None);
        }
        Ok(Some(line.trim().to_owned()))
    }
}

/// Ask about one call through `ask`.
fn ask_decision(
    ask: &mut (impl Asker + ?Sized),
    request: &ApprovalRequest,
    index: usize,
    total: usize,
) -> Result<Option<Decision>> {
    ask.say(&format!("\n{}", describe(request, index, total)))?;
    // Always in this order, whatever order the call lists them in.
    let order = [
        DecisionKind::Approve,
        DecisionKind::Reject,
        DecisionKind::Edit,
        DecisionKind::Respond,
    ];
    let choices: Vec<&str> = order
        .iter()
        .filter(|k| request.allowed.contains(k))
        .map(|k| match k {
            DecisionKind::Approve => "[y]es",
            DecisionKind::Reject => "[n]o",
            DecisionKind::Edit => "[e]dit",
            DecisionKind::Respond => "[r]espond",
        })
        .collect();
    let question = format!("Run it? {}: ", choices.join(" / "));
    loop {
        let Some(answer) = ask.ask(&question, "")? else {
            return Ok(None);
        };
        let kind = match answer.to_ascii_lowercase().as_str() {
            "y" | "yes" => DecisionKind::Approve,
            "n" | "no" => DecisionKind::Reject,
            "e" | "edit" => DecisionKind::Edit,
            "r" | "respond" => DecisionKind::Respond,
            _ => {
                ask.say(&format!("Answer with one of {}.", choices.join(", ")))?;
                continue;
            }
        };
        if !request.allowed.contains(&kind) {
            ask.say(&format!("This call does not accept {kind}."))?;
            continue;
        }
        return match kind {
            DecisionKind::Approve => Ok(Some(Decision::Approve)),
            DecisionKind::Reject => {
                Ok(ask
                    .ask("Reason for the model (optional): ", "")?
                    .map(|reason| Decision::Reject {
                        message: (!reason.is_empty()).then_some(reason),
                    }))
            }
            DecisionKind::Respond => Ok(ask.ask("Answer for the model: ", "")?.map(Decision::respond)),
            DecisionKind::Edit => {
                let current = serde_json::to_string(&Sorted(&request.args)).unwrap_or_default();
                loop {
                    let Some(text) = ask.ask("New arguments (one line of JSON): ", &current)? else {
                        return Ok(None);
                    };
                    match serde_json::from_str::<serde_json::Value>(&text) {
                        Ok(args) if args.is_object() => return Ok(Some(Decision::edit(args))),
                        Ok(_) => ask.say("The arguments must be a JSON object.")?,
                        Err(e) => ask.say(&format!("Not JSON: {e}"))?,
                    }
                }
            }
        };
    }
}

/// A call as the prompt and the waiting message show it (model-written text escaped).
pub fn describe(request: &ApprovalRequest, index: usize, total: usize) -> String {
    let mut text = format!(
        "Approval needed ({} of {total}): {} (call {})",
        index + 1,
        safe(&request.tool),
        safe(&request.id)
    );
    if !request.agents.is_empty() {
        let path: Vec<String> = request.agents.iter().map(|a| safe(&a.agent)).collect();
        text.push_str(&format!(", in subagent {}", path.join(" > ")));
    }
    if let Some(why) = &request.description {
        text.push_str(&format!("\n  why: {}", safe(why)));
    }
    let args = serde_json::to_string_pretty(&Sorted(&request.args)).unwrap_or_default();
    text.push_str("\n  arguments:");
    for line in args.lines() {
        text.push_str("\n    ");
        text.push_str(&safe(line));
    }
    text
}

/// What `trellis run` prints when it stops with calls undecided: the calls and the command that
/// continues the thread.
pub fn waiting_message(interrupt: &Interrupt, waiting: &[String], state_dir: &Path) -> String {
    let mut text = String::from("The run stopped before these tool calls, which wait for a decision:\n");
    let total = interrupt.requests.len();
    for (index, request) in interrupt.requests.iter().enumerate() {
        if waiting.contains(&request.id) {
            text.push_str(&describe(request, index, total));
            text.push('\n');
        }
    }
    text.push_str(&format!(
        "Continue it on a terminal (to be asked) or with --approve all|none|TOOL,... or --decisions FILE:\n  {}\n",
        resume_command(&interrupt.thread_id, state_dir)
    ));
    text
}

/// The `trellis resume` command for a thread, quoted for a POSIX shell.
pub fn resume_command(thread_id: &str, state_dir: &Path) -> String {
    let dir = state_dir.to_string_lossy();
    let quote = |s: &str| {
        shlex::try_quote(s)
            .map(|q| q.into_owned())
            .unwrap_or_else(|_| s.to_owned())
    };
    format!("trellis resume {} --state-dir {}", quote(thread_id), quote(&dir))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;
    use trellis_middleware::ToolCall;
    use trellis_middleware::runtime::interrupt::{AgentFrame, ToolGate};

    fn request(id: &str, tool: &str, allowed: &[DecisionKind]) -> ApprovalRequest {
        ApprovalRequest {
            id: id.into(),
            tool: tool.into(),
            call_id: id.into(),
            args: json!({"file_path": "/a"}),
            description: None,
            allowed: allowed.to_vec(),
            agents: Vec::new(),
        }
    }

    fn interrupt(requests: Vec<ApprovalRequest>) -> Interrupt {
        Interrupt {
            thread_id: "t-1".into(),
            step: 0,
            requests,
        }
    }

    #[test]
    fn ask_lists_tools_and_none_turns_it_off() {
        let gate = gate(&["execute,write_file".into(), " edit_file ".into()])
            .unwrap()
            .unwrap();
        assert_eq!(
            gate.tools().collect::<Vec<_>>(),
            ["edit_file", "execute", "write_file"]
        );
        assert!(gate.review(&ToolCall::new("c", "execute", json!({}))).is_some());
        assert!(gate.review(&ToolCall::new("c", "read_file", json!({}))).is_none());
        assert!(super::gate(&["none".into()]).unwrap().is_none());
        assert!(super::gate(&["none,execute".into()]).is_err());
    }

    #[test]
    fn approve_parses_and_never_approves_what_a_call_does_not_accept() {
        assert_eq!("all".parse::<ApproveRule>(), Ok(ApproveRule::All));
        assert_eq!("none".parse::<ApproveRule>(), Ok(ApproveRule::None));
        let rule: ApproveRule = "write_file, execute".parse().unwrap();
        assert!(rule.approves(&request("a", "execute", &DecisionKind::ALL)));
        assert!(!rule.approves(&request("a", "delete", &DecisionKind::ALL)));
        assert!(!ApproveRule::All.approves(&request("a", "x", &[DecisionKind::Reject])));
        assert!(",".parse::<ApproveRule>().is_err());
        assert!("all,execute".parse::<ApproveRule>().is_err());
    }

    #[test]
    fn file_decisions_win_then_the_rule_then_the_prompt() {
        let i = interrupt(vec![
            request("a", "execute", &DecisionKind::ALL),
            request("b", "write_file", &DecisionKind::ALL),
            request("c", "edit_file", &DecisionKind::ALL),
        ]);
        let given = Decisions::new().decide("a", Decision::reject("from file"));
        let rule: ApproveRule = "execute,write_file".parse().unwrap();
        let Outcome::Waiting(waiting) = decide(&i, &rule, Some(&given), None).unwrap() else {
            panic!("c has no decision without a prompt")
        };
        assert_eq!(waiting, ["c"]);
        let mut prompter = LinePrompter::new("r\n42\n".as_bytes(), Vec::new());
        let Outcome::Decided(d) = decide(&i, &rule, Some(&given), Some(&mut prompter)).unwrap() else {
            panic!("all decided")
        };
        assert_eq!(d.get("a"), Some(&Decision::reject("from file")));
        assert_eq!(d.get("b"), Some(&Decision::Approve));
        assert_eq!(d.get("c"), Some(&Decision::respond("42")));
    }

    #[test]
    fn the_prompt_offers_what_the_call_accepts_and_checks_edits() {
        let r = request("a", "write_file", &[DecisionKind::Approve, DecisionKind::Reject]);
        let mut out = Vec::new();
        let d = LinePrompter::new("e\nmaybe\nn\n  too risky \n".as_bytes(), &mut out)
            .decide(&r, 0, 1)
            .unwrap();
        assert_eq!(d, Some(Decision::reject("too risky")));
        let shown = String::from_utf8(out).unwrap();
        assert!(shown.contains("Run it? [y]es / [n]o: "), "{shown}");
        assert!(shown.contains("This call does not accept edit."), "{shown}");
        assert!(shown.contains("Answer with one of [y]es, [n]o."), "{shown}");

        let all = request("a", "write_file", &DecisionKind::ALL);
        let mut out = Vec::new();
        let d = LinePrompter::new("e\n[1]\n{\"file_path\": \"/b\"}\n".as_bytes(), &mut out)
            .decide(&all, 0, 1)
            .unwrap();
        assert_eq!(d, Some(Decision::edit(json!({"file_path": "/b"}))));
        assert!(String::from_utf8(out).unwrap().contains("must be a JSON object"));
        let d = LinePrompter::new("".as_bytes(), Vec::new())
            .decide(&all, 0, 1)
            .unwrap();
        assert_eq!(d, None, "end of input decides nothing");
        let d = LinePrompter::new("n\n\n".as_bytes(), Vec::new())
            .decide(&all, 0, 1)
            .unwrap();
        assert_eq!(d, Some(Decision::Reject { message: None }));
    }

    #[test]
    fn descriptions_escape_model_text_and_name_the_subagents() {
        let mut r = request("t1/e1", "write\u{1b}[2Jfile", &DecisionKind::ALL);
        r.agents.push(AgentFrame {
            call_id: "t1".into(),
            thread_id: "task-1".into(),
            agent: "worker".into(),
        });
        r.description = Some("/a matches /**".into());
        let text = describe(&r, 1, 2);
        assert!(!text.contains('\u{1b}'), "{text:?}");
        assert!(text.starts_with("Approval needed (2 of 2): write"), "{text}");
        assert!(text.contains("in subagent worker"), "{text}");
        assert!(text.contains("why: /a matches /**"), "{text}");
        assert_eq!(
            resume_command("t-1", Path::new("/tmp/my state")),
            "trellis resume t-1 --state-dir '/tmp/my state'"
        );
    }
}
