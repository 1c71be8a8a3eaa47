//! Which folders of an on-reach mount a command can reach.
//!
//! A skill source holds hundreds or thousands of skill folders; a command runs the scripts of one or
//! two. Copying the whole source out of a bucket for every command would cost seconds, so an
//! [`ExecMount`](trellis_backend::sandbox::ExecMount) with `on_reach` set materializes only the folders directly below
//! its path that the command names. The rule, chosen to be predictable for the model (the tool
//! description states it):
//!
//! * a folder is reached when the working directory is inside it;
//! * or when the command text names a path inside it: the mount's absolute path followed by `/` and
//!   the folder's name (`/skills/team/pdf/scripts/fill.py` reaches `pdf` of the mount
//!   `/skills/team`), or, when the working directory is above the mount, the same path written
//!   relative to it (`skills/team/pdf/…` from `/`);
//! * a name holding a glob character (`*`, `?`, `[`) reaches every folder of the mount, as far as
//!   the materialization limits allow.
//!
//! Anything else — a script that builds a sibling skill's path at run time, say — finds the folder
//! absent. Scanning the text is deliberately simple: it may reach a folder the command does not use
//! (a name inside a comment), which costs a copy, never a wrong answer.

use std::collections::BTreeSet;

use trellis_backend::VirtualPath;

/// What a command reaches below one mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reached {
    /// Every folder (a glob named them all).
    All,
    /// These folder names (possibly none).
    Folders(BTreeSet<String>),
}

/// Characters that end a path in shell text.
fn ends_path(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '/' | '\'' | '"' | ';' | '|' | '&' | ')' | '(' | '<' | '>' | '`' | '$' | ','
        )
}

/// Characters that may stand right before a relative path in shell text.
fn starts_path(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '\'' | '"' | '=' | ':' | '(' | '`' | ';' | '|' | '&' | '<' | '>'
        )
}

/// The folders of the mount at `mount` that `command`, run in `cwd`, reaches.
pub(crate) fn reached(mount: &VirtualPath, command: &str, cwd: &VirtualPath) -> Reached {
    let mut folders = BTreeSet::new();
    if let Some(rel) = cwd.relative_to(mount)
        && let Some(first) = rel.split('/').find(|s| !s.is_empty())
    {
        folders.insert(first.to_owned());
    }
    let mut prefixes: Vec<(String, bool)> =
        vec![(format!("{}/", mount.as_str().trim_end_matches('/')), false)];
    if let Some(rel) = mount.relative_to(cwd).filter(|r| !r.is_empty()) {
        prefixes.push((format!("{rel}/"), true));
        prefixes.push((format!("./{rel}/"), true));
    }
    for (prefix, relative) in &prefixes {
        let mut from = 0;
        while let Some(found) = command[from..].find(prefix.as_str()) {
            let start = from + found;
            from = start + prefix.len();
            let before = command[..start].chars().next_back();
            // An absolute prefix must not be the tail of a longer path (`/x/skills/team/`); a
            // relative one must start a word.
            let boundary = match before {
                None => true,
                Some(c) if *relative => starts_path(c),
                Some(c) => c != '/' && !c.is_alphanumeric() && c != '.' && c != '_' && c != '-',
            };
            if !boundary {
                continue;
            }
            let name: String = command[from..].chars().take_while(|c| !ends_path(*c)).collect();
            if name.is_empty() || name == "." || name == ".." {
                continue;
            }
            if name.contains(['*', '?', '[']) {
                return Reached::All;
            }
            folders.insert(name);
        }
    }
    Reached::Folders(folders)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn names(r: Reached) -> Vec<String> {
        match r {
            Reached::All => vec!["*".into()],
            Reached::Folders(f) => f.into_iter().collect(),
        }
    }

    #[test]
    fn absolute_paths_reach_their_folder() {
        let m = p("/skills/team");
        let r = reached(
            &m,
            "python3 /skills/team/pdf/scripts/fill.py /uploads/a.csv",
            &p("/"),
        );
        assert_eq!(names(r), ["pdf"]);
        let r = reached(
            &m,
            "cat '/skills/team/a/x' \"/skills/team/b\";ls /skills/team/c|wc",
            &p("/"),
        );
        assert_eq!(names(r), ["a", "b", "c"]);
    }

    #[test]
    fn the_mount_itself_or_a_longer_path_reaches_nothing() {
        let m = p("/skills/team");
        assert_eq!(
            names(reached(&m, "ls /skills/team", &p("/"))),
            Vec::<String>::new()
        );
        assert_eq!(
            names(reached(&m, "ls /x/skills/team/pdf", &p("/"))),
            Vec::<String>::new()
        );
        assert_eq!(
            names(reached(&m, "ls /skills/teams/pdf", &p("/"))),
            Vec::<String>::new()
        );
        assert_eq!(
            names(reached(&m, "ls /skills/team/../x", &p("/"))),
            Vec::<String>::new()
        );
    }

    #[test]
    fn relative_paths_and_the_working_directory_reach_folders() {
        let m = p("/skills/team");
        assert_eq!(
            names(reached(&m, "python3 skills/team/pdf/run.py", &p("/"))),
            ["pdf"]
        );
        assert_eq!(names(reached(&m, "sh ./team/docx/x.sh", &p("/skills"))), ["docx"]);
        assert_eq!(
            names(reached(
                &m,
                "python3 scripts/run.py",
                &p("/skills/team/xlsx/scripts")
            )),
            ["xlsx"]
        );
        // A relative prefix must start a word.
        assert_eq!(
            names(reached(&m, "cat myskills/team/pdf/x", &p("/"))),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_glob_reaches_everything() {
        assert_eq!(
            names(reached(&p("/skills/team"), "ls /skills/team/*/SKILL.md", &p("/"))),
            ["*"]
        );
    }
}
