//! Trusted folders (security review F1): the user's own configuration file and its
//! `trusted_projects` list, the check `run` and `chat` make before obeying a found `trellis.toml`'s
//! keys that need trust ([`super::restricted`]), and `trellis trust [DIR]`.
//!
//! The file is `$TRELLIS_CONFIG_HOME/config.toml`, else `$XDG_CONFIG_HOME/trellis/config.toml`,
//! else `~/.config/trellis/config.toml`:
//!
//! ```toml
//! trusted_projects = ["/home/me/src/app"]
//! ```
//!
//! Entries are absolute paths; a folder is trusted when it or one of its ancestors is listed
//! (compared by whole path components, after following symlinks, so `/tmp/a` does not trust
//! `/tmp/ab`). A missing file trusts nothing; a file that does not parse, has another key or a
//! relative entry is an error naming the file. There is no terminal prompt: trusting is always an
//! explicit `trellis trust` or `--agent FILE`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;

use super::error::{self, AgentFileError, line_of_key};
use super::restricted::Restricted;

/// The environment variable naming the directory of the user's `config.toml` (over the XDG
/// location).
pub const CONFIG_HOME_ENV: &str = "TRELLIS_CONFIG_HOME";

/// The user's configuration file (`trellis.toml`'s trust lives here, not in any project).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// Folders whose found `trellis.toml` is obeyed in full, with their subfolders.
    #[serde(default)]
    pub trusted_projects: Vec<PathBuf>,
}

/// Where the user's configuration file is, if there is a home to put it in.
pub fn config_file() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = var(CONFIG_HOME_ENV) {
        return Some(dir.join("config.toml"));
    }
    if let Some(dir) = var("XDG_CONFIG_HOME").filter(|d| d.is_absolute()) {
        return Some(dir.join("trellis/config.toml"));
    }
    var("HOME").map(|home| home.join(".config/trellis/config.toml"))
}

impl UserConfig {
    /// Read `path`; a missing file is an empty configuration.
    pub fn read(path: &Path) -> Result<Self, AgentFileError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => {
                return Err(AgentFileError::Invalid {
                    path: path.to_owned(),
                    key: None,
                    line: None,
                    message: format!("cannot read the user config: {e}"),
                });
            }
        };
        let config: Self = toml::from_str(&text).map_err(|e| error::from_toml(path, &text, &e))?;
        if let Some(relative) = config.trusted_projects.iter().find(|p| !p.is_absolute()) {
            return Err(AgentFileError::Invalid {
                path: path.to_owned(),
                key: Some("trusted_projects".to_owned()),
                line: line_of_key(&text, "", 0, "trusted_projects"),
                message: format!("`{}` is not an absolute path", relative.display()),
            });
        }
        Ok(config)
    }

    /// Whether `dir` (canonical) or one of its ancestors is listed.
    pub fn trusts(&self, dir: &Path) -> bool {
        self.trusted_projects
            .iter()
            .any(|listed| dir.starts_with(listed) || listed.canonicalize().is_ok_and(|c| dir.starts_with(c)))
    }

    /// Write the list to `path` through a temporary file renamed into place (the directory is
    /// created if missing).
    fn write(&self, path: &Path) -> Result<()> {
        let dir = path.parent().context("the config file has no directory")?;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut text = String::from(
            "# Folders whose trellis.toml is obeyed in full, with their subfolders (`trellis trust`; docs/cli.md).\ntrusted_projects = [\n",
        );
        for entry in &self.trusted_projects {
            let entry = entry
                .to_str()
                .ok_or_else(|| anyhow!("{} is not UTF-8", entry.display()))?;
            // A JSON string is a TOML basic string.
            text.push_str(&format!("    {},\n", serde_json::to_string(entry)?));
        }
        text.push_str("]\n");
        let tmp = dir.join(format!(".config.toml.{}.tmp", std::process::id()));
        let written = (|| {
            use std::io::Write;
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.with_context(|| format!("cannot write {}", path.display()))
    }
}

/// Refuse `keys` of the file `path`, found in `folder`, unless the user trusts the folder.
pub(crate) fn check(path: &Path, folder: &Path, keys: Vec<Restricted>) -> Result<(), AgentFileError> {
    if keys.is_empty() {
        return Ok(());
    }
    let folder = folder.canonicalize().unwrap_or_else(|_| folder.to_owned());
    let config = config_file();
    if let Some(file) = &config
        && UserConfig::read(file)?.trusts(&folder)
    {
        return Ok(());
    }
    Err(AgentFileError::Untrusted {
        path: path.to_owned(),
        folder,
        keys,
        config,
    })
}

/// `trellis trust [DIR]`: add DIR (default: this folder), canonical, to `trusted_projects`.
pub fn command(dir: Option<PathBuf>) -> Result<ExitCode> {
    let given = std::env::current_dir()?.join(dir.unwrap_or_else(|| PathBuf::from(".")));
    let folder = given
        .canonicalize()
        .with_context(|| format!("cannot trust {}", given.display()))?;
    if !folder.is_dir() {
        bail!("cannot trust {}: not a directory", folder.display());
    }
    let path = config_file().ok_or_else(|| {
        anyhow!("no place for the user config: set HOME, XDG_CONFIG_HOME or {CONFIG_HOME_ENV}")
    })?;
    let mut config = UserConfig::read(&path)?;
    if config.trusts(&folder) {
        println!("{} is already trusted (in {})", folder.display(), path.display());
        return Ok(ExitCode::SUCCESS);
    }
    config.trusted_projects.push(folder.clone());
    config.write(&path)?;
    println!("trusted {} (in {})", folder.display(), path.display());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_are_trusted_and_namesakes_are_not() {
        let config = UserConfig {
            trusted_projects: vec![PathBuf::from("/srv/a")],
        };
        assert!(config.trusts(Path::new("/srv/a")));
        assert!(config.trusts(Path::new("/srv/a/b/c")));
        assert!(!config.trusts(Path::new("/srv/ab")));
        assert!(!config.trusts(Path::new("/srv")));
    }

    #[test]
    fn the_list_reads_back_after_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new/config.toml");
        assert_eq!(UserConfig::read(&path).unwrap(), UserConfig::default());
        let config = UserConfig {
            trusted_projects: vec![PathBuf::from("/a \"quoted\" \\ dir"), PathBuf::from("/b")],
        };
        config.write(&path).unwrap();
        assert_eq!(UserConfig::read(&path).unwrap(), config);
    }

    #[test]
    fn a_bad_file_names_itself_and_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        for (text, expected) in [
            ("trusted_projects = [", "config.toml"),
            ("trusted_project = []", "unknown key `trusted_project`"),
            ("trusted_projects = [\"rel\"]", "`rel` is not an absolute path"),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = UserConfig::read(&path).unwrap_err().to_string();
            assert!(err.contains(expected) && err.contains("config.toml"), "{err}");
        }
    }
}
