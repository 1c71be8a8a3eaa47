//! `trellis chat`: an interactive session on one thread, with the agent `trellis run` builds
//! ([`assemble::build`]) and the same flags.
//!
//! * Each message is a run of the thread; the answer streams as it is written
//!   ([`output`]). The thread is saved like `trellis run`'s: `trellis chat --thread ID`
//!   shows its last messages and continues it, and `trellis run`/`resume --thread ID` work on it.
//! * Calls that need approval are asked about inline ([`approvals`]: `y`, `n` and a reason, `e`
//!   with the arguments to edit, `r`); `--approve` and `--decisions` decide first, as in `run`. A
//!   call left undecided (Ctrl-C or Ctrl-D at the question) keeps the thread waiting; it is asked
//!   about again before the next message is sent.
//! * Ctrl-C while a run goes on cancels that run ([`Agent::run_until`], [`AgentError::Cancelled`]),
//!   not the session: the thread keeps its last saved step (the message sent is kept; the reply
//!   being streamed is dropped) and the next message continues it. At the prompt, Ctrl-C clears
//!   the line; Ctrl-D or `/quit` leaves.
//! * Commands ([`command`]): `/skills [SEARCH]`, `/NAME [TEXT]` to pin a skill for the next model
//!   call, `/reload`, `/memory`, `/thread`, `/fork`, `/help`, `/quit`.
//!
//! Scopes: pins and the reload request are set on the next run of this session's thread (thread
//! state, in its checkpoint); another thread never gets them. The editor's input history is the
//! person's at the terminal, kept in `STATE_DIR/chat-history`, or per user with `--user ID` in
//! `STATE_DIR/chat-history.users/ID` (outside the user's workspace, so the agent never sees it),
//! so one user's typed lines never come back in another user's session.
//!
//! [`Agent::run_until`]: trellis_middleware::Agent::run_until
//! [`AgentError::Cancelled`]: trellis_middleware::AgentError::Cancelled

pub mod command;
pub mod editor;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use trellis_middleware::backend::{Backend, VirtualPath};
use trellis_middleware::skills::{PIN_SKILLS, RELOAD_SKILLS, SkillCatalog, SkillIndex};
use trellis_middleware::untrusted::escape_controls as safe;
use trellis_middleware::{AgentError, Checkpointer, RunInput, ThreadId};

use crate::cli::approvals::{self, Outcome, Prompter};
use crate::cli::assemble::{self, Built};
use crate::cli::config::RunConfig;
use crate::cli::output::{self, OutputMode};
use crate::cli::run::Approvals;
use crate::cli::state_dir::StateDir;
use crate::cli::{pin, threads};
use crate::mcp::McpServers;
use command::{COMMANDS, Line};
use editor::{LineEditor, Read};

/// Messages of a resumed thread shown when the chat starts.
const SHOWN_ON_RESUME: usize = 10;
/// Skills `/skills SEARCH` shows.
const SEARCH_LIMIT: usize = 10;

/// Where a chat starts.
#[derive(Debug, Clone, Default)]
pub struct ChatStart {
    /// `--thread ID`: continue it (or start it with this id).
    pub thread: Option<String>,
    /// `--fork ID@STEP`.
    pub fork: Option<String>,
}

/// `trellis chat`: start the MCP servers, talk until `/quit`, and stop them again.
pub async fn chat(
    config: RunConfig,
    state_dir: &StateDir,
    start: ChatStart,
    approvals: Approvals,
) -> Result<ExitCode> {
    let servers = assemble::mcp_servers(&config)?;
    let result = session(&config, state_dir, start, servers.clone(), &approvals).await;
    if let Some(servers) = servers {
        servers.shutdown().await;
    }
    result
}

/// One session's state.
struct Session<'a> {
    built: Built,
    config: &'a RunConfig,
    state_dir: &'a StateDir,
    approvals: &'a Approvals,
    thread: ThreadId,
    catalog: SkillCatalog,
    editor: LineEditor,
    /// Skills to pin on the next run.
    pins: Vec<String>,
    /// `/reload` was asked for: rescan on the next run.
    reload: bool,
}

async fn session(
    config: &RunConfig,
    state_dir: &StateDir,
    start: ChatStart,
    servers: Option<Arc<McpServers>>,
    approvals: &Approvals,
) -> Result<ExitCode> {
    let built = assemble::build(config, state_dir, servers).await?;
    let thread = assemble::start_thread(&built.checkpointer, start.thread, start.fork).await?;
    config.save(state_dir, &thread)?;
    // From here on SIGINT is caught (it cancels a run), never the end of the process.
    let _sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let catalog = pin::catalog(&built.ws).await;
    let history = state_dir.chat_history(config.user.as_deref());
    if let Some(dir) = history.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut editor = LineEditor::new(Some(history))?;
    editor.set_words(command::words(&catalog));
    let mut s = Session {
        built,
        config,
        state_dir,
        approvals,
        thread,
        catalog,
        editor,
        pins: Vec::new(),
        reload: false,
    };
    s.greet().await?;
    loop {
        match s.settle_waiting().await? {
            Settled::Nothing => {}
            Settled::Ran => continue,
            Settled::Leave => {
                eprintln!("{}", s.come_back());
                return Ok(ExitCode::from(approvals::EXIT_WAITING));
            }
        }
        let input = match s.editor.read("> ", "", true)? {
            Read::Line(line) => line,
            Read::Interrupted => {
                eprintln!("(Ctrl-C: the line is cleared; /quit or Ctrl-D leaves)");
                continue;
            }
            Read::End => break,
        };
        match command::parse(&input, &s.catalog) {
            Line::Empty => {}
            Line::Quit => break,
            Line::Help => help(),
            Line::Say(text) => s.send(text).await?,
            Line::Pin { skill, text } => {
                if !s.pins.contains(&skill) {
                    s.pins.push(skill.clone());
                }
                if text.is_empty() {
                    eprintln!(
                        "pinned {}: its instructions go with your next message",
                        safe(&skill)
                    );
                } else {
                    s.send(text).await?;
                }
            }
            Line::Skills(query) => s.list_skills(query.as_deref()),
            Line::Reload => s.reload().await,
            Line::Memory => s.memory().await,
            Line::Thread => s.show_thread().await?,
            Line::Fork => s.fork().await?,
            Line::Unknown { word, close } => {
                let mut text = format!("/{} is not a command or a skill", safe(&word));
                if !close.is_empty() {
                    text.push_str(&format!("; did you mean {}?", close.join(", ")));
                }
                eprintln!("{text} (/help lists the commands, /skills the skills; //… sends a leading /)");
            }
        }
    }
    eprintln!("{}", s.come_back());
    Ok(ExitCode::SUCCESS)
}

/// What [`Session::settle_waiting`] did.
enum Settled {
    /// The thread waits for nothing.
    Nothing,
    /// It asked (and resumed, when everything was decided).
    Ran,
    /// The person left with calls still undecided (exit status 3, as `trellis run`).
    Leave,
}

fn help() {
    let width = COMMANDS.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
    for (command, what) in COMMANDS {
        eprintln!("  {command:<width$}  {what}");
    }
    eprintln!("Keys: Ctrl-C cancels the running step (at the prompt: clears the line); Ctrl-D leaves;");
    eprintln!("      end a line with \\ to go on on the next one; Tab completes /commands and skills.");
}

impl Session<'_> {
    async fn greet(&mut self) -> Result<()> {
        let stored = self.built.checkpointer.load(&self.thread).await?;
        match stored {
            Some(stored) => {
                let messages = &stored.checkpoint.state.messages;
                eprintln!("thread {}: {} messages so far", self.thread, messages.len());
                let skip = messages.len().saturating_sub(SHOWN_ON_RESUME);
                if skip > 0 {
                    eprintln!("  … ({skip} earlier)");
                }
                for message in messages.iter().skip(skip) {
                    eprintln!("  {}", threads::brief(message));
                }
            }
            None => eprintln!("thread {} (new)", self.thread),
        }
        eprintln!(
            "{} skills; /help lists the commands. Ctrl-C cancels a running step, Ctrl-D leaves.",
            self.catalog.len()
        );
        Ok(())
    }

    /// How to continue this thread later.
    fn come_back(&self) -> String {
        let dir = self.state_dir.root().to_string_lossy();
        let quoted = shlex::try_quote(&dir)
            .map(|q| q.into_owned())
            .unwrap_or_else(|_| dir.to_string());
        format!(
            "thread {} kept: trellis chat --thread {} --state-dir {quoted}",
            self.thread, self.thread
        )
    }

    /// When the thread waits for decisions, ask for them and resume.
    async fn settle_waiting(&mut self) -> Result<Settled> {
        let Some(interrupt) = self.built.agent.pending_interrupt(&self.thread).await? else {
            return Ok(Settled::Nothing);
        };
        eprintln!("This thread waits for decisions on its last step first.");
        match self.decide(&interrupt)? {
            Outcome::Decided(decisions) => {
                self.turn(RunInput::resume(decisions)).await?;
                Ok(Settled::Ran)
            }
            Outcome::Waiting(_) => {
                eprintln!(
                    "Still undecided. Answer the questions to go on, or leave with Ctrl-D and use {}",
                    approvals::resume_command(self.thread.as_str(), self.state_dir.root())
                );
                // Leave on a second Ctrl-D / end of input, else ask again.
                match self
                    .editor
                    .read("(Enter to be asked again, Ctrl-D to leave) ", "", false)?
                {
                    Read::End => Ok(Settled::Leave),
                    _ => Ok(Settled::Ran),
                }
            }
        }
    }

    fn decide(&mut self, interrupt: &trellis_middleware::runtime::interrupt::Interrupt) -> Result<Outcome> {
        approvals::decide(
            interrupt,
            &self.approvals.rule,
            self.approvals.given.as_ref(),
            Some(&mut self.editor as &mut dyn Prompter),
        )
    }

    /// Send `text` with the pins and reload waiting for it.
    async fn send(&mut self, text: String) -> Result<()> {
        let mut input = RunInput::human(text);
        if !self.pins.is_empty() {
            input = input.slot(&PIN_SKILLS, std::mem::take(&mut self.pins));
        }
        if std::mem::take(&mut self.reload) {
            input = input.slot(&RELOAD_SKILLS, true);
        }
        self.turn(input).await
    }

    /// Run `first` and, while the run stops for decisions, ask and resume. Errors of the run are
    /// shown and end the turn, not the session.
    async fn turn(&mut self, first: RunInput) -> Result<()> {
        let mode = if std::io::stdout().is_terminal() {
            OutputMode::Terminal
        } else {
            OutputMode::Plain
        };
        let started = std::time::Instant::now();
        let (events, printed) = output::sink(mode, self.approvals.prices.clone());
        let mut input = first;
        loop {
            let run = self.built.prepare(input, &self.thread).events(events.clone());
            let cancel = async {
                // An error installing the handler means Ctrl-C cannot cancel: wait forever.
                if tokio::signal::ctrl_c().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            let out = match self.built.agent.run_until(run, cancel).await {
                Ok(out) => out,
                Err(AgentError::Cancelled { .. }) => {
                    println!();
                    eprintln!(
                        "cancelled: the thread keeps its last saved step (your message stays, the unfinished reply is dropped)"
                    );
                    return Ok(());
                }
                Err(e) => {
                    eprintln!("trellis: {e}");
                    return Ok(());
                }
            };
            let Some(interrupt) = &out.interrupt else {
                output::finish(&out, mode, &printed);
                output::summary(&printed, mode, started.elapsed());
                return Ok(());
            };
            match self.decide(interrupt)? {
                Outcome::Decided(decisions) => input = RunInput::resume(decisions),
                Outcome::Waiting(waiting) => {
                    eprintln!(
                        "{} call(s) left undecided: the thread waits, and you are asked again before your next message.",
                        waiting.len()
                    );
                    return Ok(());
                }
            }
        }
    }

    fn list_skills(&self, query: Option<&str>) {
        let skills = self.catalog.skills();
        let shown: Vec<usize> = match query {
            None => (0..skills.len()).collect(),
            Some(q) => SkillIndex::new(&self.catalog)
                .search(&self.catalog, q, SEARCH_LIMIT)
                .into_iter()
                .map(|hit| hit.index)
                .collect(),
        };
        if shown.is_empty() {
            eprintln!(
                "no skills{}",
                query.map(|q| format!(" match {:?}", safe(q))).unwrap_or_default()
            );
            return;
        }
        for i in shown {
            if let Some(skill) = skills.get(i) {
                eprintln!("  /{}  {}", safe(&skill.name), safe(&skill.description));
            }
        }
    }

    async fn reload(&mut self) {
        let before: Vec<String> = self.catalog.skills().iter().map(|s| s.name.clone()).collect();
        self.catalog = pin::catalog(&self.built.ws).await;
        self.editor.set_words(command::words(&self.catalog));
        self.reload = true;
        let now: Vec<&str> = self.catalog.skills().iter().map(|s| s.name.as_str()).collect();
        let added: Vec<&str> = now
            .iter()
            .copied()
            .filter(|n| !before.iter().any(|b| b == n))
            .collect();
        let removed: Vec<&str> = before
            .iter()
            .map(String::as_str)
            .filter(|b| !now.contains(b))
            .collect();
        let list = |names: &[&str]| names.iter().map(|n| safe(n)).collect::<Vec<_>>().join(", ");
        let mut text = format!("{} skills", now.len());
        if !added.is_empty() {
            text.push_str(&format!("; new: {}", list(&added)));
        }
        if !removed.is_empty() {
            text.push_str(&format!("; gone: {}", list(&removed)));
        }
        eprintln!("{text}. The next model call sees them.");
    }

    async fn memory(&self) {
        let ws = &self.built.ws;
        if ws.memory.is_empty() && ws.user_files.is_none() {
            eprintln!("no memory files (give them with --memory FILE, or --user for a user's own)");
            return;
        }
        for path in &ws.memory {
            show_file(ws.backend.as_ref(), path, "memory").await;
        }
        if let Some(files) = &ws.user_files {
            for path in crate::cli::mounts::USER_MEMORY {
                show_file(files.as_ref(), &format!("/{path}"), "your memory").await;
            }
        }
    }

    async fn show_thread(&self) -> Result<()> {
        let stored = self.built.checkpointer.load(&self.thread).await?;
        let (messages, step) = stored
            .map(|s| (s.checkpoint.state.messages.len(), s.checkpoint.seq))
            .unwrap_or_default();
        eprintln!("thread {}: {messages} messages, checkpoint {step}", self.thread);
        eprintln!("{}", self.come_back());
        Ok(())
    }

    async fn fork(&mut self) -> Result<()> {
        let Some(stored) = self.built.checkpointer.load(&self.thread).await? else {
            eprintln!("nothing to fork yet: the thread has no messages");
            return Ok(());
        };
        let spec = format!("{}@{}", self.thread, stored.checkpoint.seq);
        let to = threads::fork(&self.built.checkpointer, &spec).await?;
        self.config.save(self.state_dir, &to)?;
        eprintln!("now on thread {to}; thread {} stays as it was", self.thread);
        self.thread = to;
        Ok(())
    }
}

/// Print a memory file (escaped), or why it cannot be.
async fn show_file(backend: &dyn Backend, path: &str, what: &str) {
    let read = match VirtualPath::parse(path) {
        Ok(p) => backend.read(&p, None).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match read {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.bytes);
            eprintln!("── {what}: {} ({} bytes)", safe(path), out.bytes.len());
            for line in text.lines() {
                eprintln!("  {}", safe(line));
            }
        }
        Err(e) => eprintln!("── {what}: {} (not loaded: {})", safe(path), safe(&e)),
    }
}
