//! Files a command may change in its copy but that are never written back: the ones host tools
//! run or obey without asking, so a command (or a prompt injection driving it) could plant code
//! that runs on the host, outside any sandbox, the next time the user works in the folder.
//!
//! The list follows Anthropic's sandbox-runtime mandatory deny list and codex-rs's protected
//! paths (`../shared/spec/sandbox-anchors.md` §2, §7.2), at any depth of the view:
//! - git's hooks and configuration inside a `.git` directory (`.git/hooks/…`, `.git/config`,
//!   `.git/config.worktree`, `.git/commondir`, and the same under `.git/modules/…` and
//!   `.git/worktrees/…`): `core.hooksPath`, `core.fsmonitor` or a hook is a command git runs;
//! - shell and tool start-up files: `.bashrc`, `.bash_profile`, `.bash_login`, `.profile`,
//!   `.zshrc`, `.zshenv`, `.zprofile`, `.zlogin`, `.envrc` (direnv), `.gitconfig`, `.gitmodules`,
//!   `.ripgreprc`, `.mcp.json`;
//! - editor and agent folders that hold tasks or commands: `.vscode/`, `.idea/`,
//!   `.claude/commands/`, `.claude/agents/`.
//!
//! Creating, changing and deleting them are all refused (a deleted `.git/config` breaks the
//! repository as surely as a changed one subverts it). The file tools are not affected: their
//! writes are the model's own, one file at a time, under the permission rules and approvals.

use trellis_backend::VirtualPath;

/// Start-up and configuration files refused wherever they are.
const STARTUP_FILES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".envrc",
    ".gitconfig",
    ".gitmodules",
    ".ripgreprc",
    ".mcp.json",
];

/// Directories (as consecutive segments) everything below which is refused.
const TOOL_DIRS: &[&[&str]] = &[
    &[".vscode"],
    &[".idea"],
    &[".claude", "commands"],
    &[".claude", "agents"],
];

/// Names directly in a git directory that git obeys as configuration.
const GIT_CONFIG_FILES: &[&str] = &["config", "config.worktree", "commondir"];

/// Paths relative to a mounted directory that a sandbox binds read-only over themselves where they
/// exist, so the command cannot change them at all (the write-back refuses them anyway, at any
/// depth): git's hooks and configuration of the directory's own repository, the editor and agent
/// folders, and the start-up files at its top.
pub(crate) fn read_only_in_mounts() -> impl Iterator<Item = String> {
    GIT_CONFIG_FILES
        .iter()
        .map(|f| format!(".git/{f}"))
        .chain([".git/hooks".to_owned()])
        .chain(TOOL_DIRS.iter().map(|d| d.join("/")))
        .chain(STARTUP_FILES.iter().map(|s| (*s).to_owned()))
}

/// Why a write-back of `path` is refused, or `None` when it is not protected.
pub(crate) fn protected(path: &VirtualPath) -> Option<&'static str> {
    let segments: Vec<&str> = path.segments().collect();
    let name = *segments.last()?;
    if STARTUP_FILES.contains(&name) {
        return Some("a shell or tool start-up file, which host tools run or obey");
    }
    for dir in TOOL_DIRS {
        // Below the directory: the window ends before the last segment.
        let below = segments.len().saturating_sub(1);
        if segments[..below].windows(dir.len()).any(|w| w == *dir) {
            return Some("an editor or agent folder of tasks and commands, which host tools run");
        }
    }
    let git = segments.iter().position(|s| *s == ".git")?;
    let inside = &segments[git + 1..];
    if inside.contains(&"hooks") {
        return Some("a git hook, which git runs on the host");
    }
    // `.git/config`, and a submodule's or linked worktree's own git directory's config.
    let parent_is_git_dir = match inside.len() {
        1 => true,
        n => n >= 3 && matches!(inside[n - 3], "modules" | "worktrees"),
    };
    if parent_is_git_dir && GIT_CONFIG_FILES.contains(&name) {
        return Some("git configuration, which can name commands git runs on the host");
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn refused(path: &str) -> bool {
        protected(&VirtualPath::parse(path).unwrap()).is_some()
    }

    #[test]
    fn hooks_config_and_startup_files_are_refused_at_any_depth() {
        for path in [
            "/workspace/.git/hooks/pre-commit",
            "/workspace/sub/.git/hooks/x/y",
            "/workspace/.git/config",
            "/workspace/.git/config.worktree",
            "/workspace/.git/commondir",
            "/workspace/.git/modules/lib/config",
            "/workspace/.git/modules/lib/hooks/post-checkout",
            "/workspace/.git/worktrees/w/config",
            "/workspace/.bashrc",
            "/home/.profile",
            "/workspace/deep/down/.envrc",
            "/workspace/.gitmodules",
            "/workspace/.vscode/tasks.json",
            "/workspace/.claude/commands/x.md",
            "/.mcp.json",
        ] {
            assert!(refused(path), "{path}");
        }
    }

    #[test]
    fn ordinary_files_and_look_alikes_are_not() {
        for path in [
            "/workspace/src/main.rs",
            "/workspace/.git/HEAD",
            "/workspace/.git/objects/ab/cdef",
            "/workspace/.git/refs/heads/main",
            "/workspace/config",
            "/workspace/.g/hooks/pre-commit",
            "/workspace/hooks/.git-like",
            "/workspace/.bashrc.d.txt",
            "/workspace/.vscode",
            "/workspace/.claude/settings.json",
            "/workspace/.git/modules/lib/objects/config",
        ] {
            assert!(!refused(path), "{path}");
        }
    }
}
