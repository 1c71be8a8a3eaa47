//! Many users of one agent: 1,000 users × 5 personal skills (and 3 memory files each) over a
//! 5,000-skill organisation library, on local disk. Prints one JSON object.
//!
//! The agent is the skills middleware (organisation source + personal skills), prompt caching and
//! memory (the agent's `AGENTS.md` + each user's `agents/{AGENTS,USER,MEMORY}.md`), with a
//! zero-cost scripted model and no checkpointer, so nothing but the per-user layer accumulates.
//!
//! * `peak_rss_*_mb`: `VmHWM` of a fresh child process that builds the agent and runs the first
//!   request of one user, and of one that does so for every user; `rss_ratio_all_users_to_one`
//!   targets ≤ 1.5 (one organisation catalog, shared; only bounded per-user overlays are added).
//! * `new_user_first_request_ms`: median first request of a user the agent has never seen;
//!   `single_user_new_thread_ms` the same request (a new thread) on an agent without the user layer;
//!   `user_files_read_ms` the median time to read one user's files directly (one `read_many` of the
//!   memory files, plus discovering their personal source). `new_user_beyond_files_ms` is the median
//!   of new user − single user − files read over interleaved samples, the target being ≤ 5 ms.
//! * `per_call_us_*`: on a warm thread, the median gap between two model calls of a 51-call run
//!   (what the reference reports), for a user (with 1,000 users served before) and on the agent
//!   without the user layer;
//!   `per_call_ratio_users_to_single` targets ≈ 1. `one_call_run_ms_*` is the one-call run, which
//!   for a user includes reading their memory files (every run does).
//! * `peak_rss_one_user_mb` is one user running as many new threads as all users together (the same
//!   work); `peak_rss_first_request_mb` a single first request, for scale.
//!
//! `cargo bench -p trellis-middleware --bench user_layers` (under `cargo test`: a quick smoke run
//! with 20 users over 200 skills).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "bench_util/mod.rs"]
mod bench_util;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bench_util::{child_spec, median, ms, peak_rss_mb, peak_rss_of_child, runtime};
use serde_json::json;
use trellis_middleware::backend::{Backend, FilesystemBackend, VirtualPath};
use trellis_middleware::runtime::message::{AiMessage, ContentBlock};
use trellis_middleware::runtime::model::ModelCapabilities;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::skills::{DiscoveryOptions, PersonalSkills, discover};
use trellis_middleware::tools::UserIdentity;
use trellis_middleware::tools::UserSpaces;
use trellis_middleware::users::UserHomes;
use trellis_middleware::*;

const PERSONAL: usize = 5;
const TURNS: usize = 50;
const MEMORY: [&str; 3] = ["agents/AGENTS.md", "agents/USER.md", "agents/MEMORY.md"];

fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

/// (organisation skills, users, timed new users)
fn sizes() -> (usize, usize, usize) {
    if smoke() { (200, 20, 5) } else { (5_000, 1_000, 40) }
}

fn skill_md(name: &str, i: usize) -> String {
    const WORDS: [&str; 12] = [
        "invoice",
        "report",
        "contract",
        "pipeline",
        "summarize",
        "review",
        "draft",
        "forecast",
        "customer",
        "weekly",
        "quality",
        "metrics",
    ];
    let description: Vec<&str> = (0..12).map(|k| WORDS[(i * 7 + k * 5) % WORDS.len()]).collect();
    format!(
        "---\nname: {name}\ndescription: {} skill {i}.\nlicense: MIT\n---\n# {name}\n\n{}\n",
        description.join(" "),
        "Step by step instructions for this task.\n".repeat(40)
    )
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The organisation library under `/skills`, the agent's `/AGENTS.md`, and `users` workspaces
/// under `/users/u<i>` (`extra` more, never used before, for the new-user timings).
fn generate(root: &Path, org: usize, users: usize) {
    write(&root.join("AGENTS.md"), "# Team\n- Cite sources.\n");
    for i in 0..org {
        let name = format!("org-skill-{i}");
        write(&root.join(format!("skills/{name}/SKILL.md")), &skill_md(&name, i));
    }
    for u in 0..users {
        let home = root.join(format!("users/u{u}/agents"));
        write(
            &home.join("AGENTS.md"),
            &format!("User u{u} works on account {u}.\n"),
        );
        write(&home.join("USER.md"), &format!("u{u} prefers short answers.\n"));
        write(&home.join("MEMORY.md"), &format!("- fact {u}\n"));
        for k in 0..PERSONAL {
            let name = format!("u{u}-skill-{k}");
            write(
                &home.join(format!("skills/{name}/SKILL.md")),
                &skill_md(&name, u * PERSONAL + k),
            );
        }
    }
}

/// When each model call started.
type Stamps = Arc<Mutex<Vec<Instant>>>;

/// 50 tool calls then an answer for a `turns` message, an answer at once otherwise; every call is
/// stamped into `stamps`.
fn model_stamped(stamps: Stamps) -> Arc<ScriptedModel> {
    Arc::new(
        ScriptedModel::from_fn(move |req| {
            stamps.lock().unwrap().push(Instant::now());
            // The run's own human message, and the tool results since.
            let mut done = 0;
            let mut turns = false;
            for m in req.messages.iter().rev() {
                match m {
                    Message::Tool(_) => done += 1,
                    Message::Human(h) => {
                        turns = h
                            .content
                            .iter()
                            .any(|c| matches!(c, ContentBlock::Text { text } if text == "turns"));
                        break;
                    }
                    _ => {}
                }
            }
            let message = if turns && done < TURNS {
                AiMessage::tool_calls([ToolCall::new(format!("c{done}"), "noop", json!({}))])
            } else {
                AiMessage::text("ok")
            };
            Ok(ModelResponse::new(message))
        })
        .with_capabilities(ModelCapabilities {
            prompt_caching: true,
            max_cache_breakpoints: 4,
            context_window: Some(200_000),
            ..ModelCapabilities::default()
        })
        .without_recording(),
    )
}

fn model() -> Arc<ScriptedModel> {
    model_stamped(Stamps::default())
}

/// The gaps between consecutive model calls of one run.
fn gaps(stamps: &Stamps) -> Vec<Duration> {
    let stamps = std::mem::take(&mut *stamps.lock().unwrap());
    stamps.windows(2).map(|w| w[1] - w[0]).collect()
}

fn noop() -> FnTool {
    FnTool::new("noop", "Do nothing.", json!({"type": "object"}), |_| async {
        Ok(ToolOutput::text("ok"))
    })
}

/// The agent over `root`; with `users`, each user's memory and personal skills too; threads kept in
/// memory only when `threads`.
fn agent(root: &Arc<dyn Backend>, model: Arc<ScriptedModel>, users: bool, threads: bool) -> Agent {
    let homes = UserHomes::new().with_user_spaces(UserSpaces::new(
        root.clone(),
        VirtualPath::parse("/users").unwrap(),
    ));
    let mut skills = SkillsMiddleware::new(vec![SkillSource::new(root.clone(), "/skills").unwrap()]);
    let mut memory = MemoryMiddleware::new(root.clone(), ["/AGENTS.md"]).unwrap();
    if users {
        skills = skills.with_personal_skills(
            PersonalSkills::new("agents/skills")
                .unwrap()
                .with_homes(homes.clone()),
        );
        memory = memory.with_user_sources(MEMORY).unwrap().with_user_homes(homes);
    }
    let builder = Agent::builder(model)
        .middleware(skills)
        .middleware(PromptCachingMiddleware::new())
        .middleware(memory)
        .tool(noop());
    let builder = if threads {
        builder
    } else {
        builder.without_checkpointer()
    };
    builder.build().unwrap()
}

fn as_user(text: &str, user: Option<usize>) -> RunInput {
    let input = RunInput::human(text);
    match user {
        Some(u) => input.extension(UserIdentity::new(format!("u{u}"))),
        None => input,
    }
}

async fn timed(agent: &Agent, input: RunInput) -> Duration {
    let started = Instant::now();
    agent.run(input).await.unwrap();
    started.elapsed()
}

/// A child process: `runs` first requests (new threads), by `users` distinct users in turn, then
/// its peak RSS on stdout. One user running as many threads as all users together is the
/// baseline: the same work, so the difference is what the users themselves cost.
async fn child(root: &str, users: usize, runs: usize) {
    let backend: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(root).unwrap());
    let agent = agent(&backend, model(), true, false);
    for r in 0..runs {
        agent.run(as_user("hi", Some(r % users))).await.unwrap();
    }
    println!("{}", peak_rss_mb());
}

fn rss_in_child(root: &Path, users: usize, runs: usize) -> f64 {
    peak_rss_of_child(&format!("{}|{users}|{runs}", root.display()))
}

/// What reading user `u`'s files costs by itself: the memory files and their personal source.
async fn read_user_files(backend: &Arc<dyn Backend>, u: usize) -> Duration {
    let started = Instant::now();
    let paths: Vec<VirtualPath> = MEMORY
        .iter()
        .map(|m| VirtualPath::parse(&format!("/users/u{u}/{m}")).unwrap())
        .collect();
    let reads = backend.read_many(&paths, None).await;
    assert!(reads.iter().all(Result::is_ok));
    let source = SkillSource::new(backend.clone(), &format!("/users/u{u}/agents/skills")).unwrap();
    let found = discover(&[source], &DiscoveryOptions::default()).await;
    assert_eq!(found.catalog.len(), PERSONAL);
    started.elapsed()
}

fn main() {
    let rt = runtime();
    if let Some(spec) = child_spec() {
        let mut parts = spec.split('|');
        let (root, users, runs) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        rt.block_on(child(root, users.parse().unwrap(), runs.parse().unwrap()));
        return;
    }
    let (org, users, fresh) = sizes();
    let dir = tempfile::tempdir().unwrap();
    let generated = Instant::now();
    generate(dir.path(), org, users + fresh);
    eprintln!(
        "generated {org} org skills and {} users in {:.1} s",
        users + fresh,
        generated.elapsed().as_secs_f64()
    );

    let rss_one = rss_in_child(dir.path(), 1, users);
    let rss_all = rss_in_child(dir.path(), users, users);
    let rss_first = rss_in_child(dir.path(), 1, 1);

    rt.block_on(async {
        let backend: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(dir.path()).unwrap());
        let with_users = agent(&backend, model(), true, false);
        let single = agent(&backend, model(), false, false);
        // Warm both: the first thread discovers the library; later threads rescan it.
        timed(&with_users, as_user("hi", Some(0))).await;
        timed(&single, as_user("hi", None)).await;
        for u in 1..users {
            with_users.run(as_user("hi", Some(u))).await.unwrap();
        }

        // Interleaved, so drift of a shared machine hits every kind alike; `beyond` is the median of
        // the paired differences.
        let (mut new_user, mut single_thread, mut files, mut known) = (vec![], vec![], vec![], vec![]);
        let mut beyond = Vec::new();
        for k in 0..fresh {
            let u = users + k;
            let f = read_user_files(&backend, u).await;
            let s = timed(&single, as_user("hi", None)).await;
            let n = timed(&with_users, as_user("hi", Some(u))).await;
            known.push(timed(&with_users, as_user("hi", Some(k % users))).await);
            beyond.push(ms(n) - ms(s) - ms(f));
            new_user.push(n);
            single_thread.push(s);
            files.push(f);
        }
        let (new_user, single_thread, files) = (median(new_user), median(single_thread), median(files));
        let known = median(known);
        beyond.sort_by(f64::total_cmp);
        let beyond = beyond[beyond.len() / 2];

        // Per call: the median gap between two model calls of a 51-call run on a thread that has run
        // once (its catalog and memory loaded), as the reference measures it; the user agent has
        // served every user first. The one-call run shows the per-run work (for a user, reading
        // their memory files).
        let (user_stamps, single_stamps) = (Stamps::default(), Stamps::default());
        let users_threads = agent(&backend, model_stamped(user_stamps.clone()), true, true);
        let single_threads = agent(&backend, model_stamped(single_stamps.clone()), false, true);
        for u in 0..users {
            users_threads.run(as_user("hi", Some(u))).await.unwrap();
        }
        let rounds = if smoke() { 2 } else { 11 };
        let (mut per_user, mut per_single, mut run_user, mut run_single) = (vec![], vec![], vec![], vec![]);
        for r in 0..rounds {
            let thread = ThreadId::new(format!("turns-{r}")).unwrap();
            let user = Some(r % users);
            users_threads.run(as_user("hi", user).thread(thread.clone())).await.unwrap();
            single_threads.run(as_user("hi", None).thread(thread.clone())).await.unwrap();
            // Alternate which agent goes first, so neither always runs on a warmer machine.
            let agents = [
                (&users_threads, user, &user_stamps, &mut per_user, &mut run_user),
                (&single_threads, None, &single_stamps, &mut per_single, &mut run_single),
            ];
            let order: Vec<_> = if r % 2 == 0 { agents.into_iter().collect() } else { agents.into_iter().rev().collect() };
            for (agent, user, stamps, per_call, per_run) in order {
                per_run.push(timed(agent, as_user("hi", user).thread(thread.clone())).await);
                gaps(stamps);
                agent.run(as_user("turns", user).thread(thread.clone())).await.unwrap();
                per_call.extend(gaps(stamps));
            }
        }
        let (per_user, per_single) = (median(per_user), median(per_single));
        let (run_user, run_single) = (median(run_user), median(run_single));
        let us = |d: Duration| (d.as_secs_f64() * 1e8).round() / 1e2;
        println!(
            "{}",
            json!({
                "org_skills": org,
                "users": users,
                "personal_skills_per_user": PERSONAL,
                "peak_rss_first_request_mb": rss_first,
                "peak_rss_one_user_mb": rss_one,
                "peak_rss_all_users_mb": rss_all,
                "rss_ratio_all_users_to_one": (rss_all / rss_one * 1000.0).round() / 1000.0,
                "rss_ratio_target": 1.5,
                "new_user_first_request_ms": ms(new_user),
                "known_user_new_thread_ms": ms(known),
                "single_user_new_thread_ms": ms(single_thread),
                "user_files_read_ms": ms(files),
                "new_user_beyond_files_ms": (beyond * 1000.0).round() / 1000.0,
                "new_user_beyond_files_target_ms": 5.0,
                "one_call_run_ms_users": ms(run_user),
                "one_call_run_ms_single_user": ms(run_single),
                "per_call_us_users": us(per_user),
                "per_call_us_single_user": us(per_single),
                "per_call_ratio_users_to_single": (per_user.as_secs_f64() / per_single.as_secs_f64() * 1000.0).round() / 1000.0,
            })
        );
    });
}
