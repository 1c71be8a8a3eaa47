//! [`McpServerConfig`]: one MCP server, how to reach it, which of its tools to offer and to whom.

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use trellis_middleware::runtime::context::RunContext;
use trellis_middleware::skills::Viewer;

use super::error::McpError;
use super::naming::validate_server_name;

/// Default time a tool call may take before it is cancelled.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Default time for starting a server: spawn or connect, `initialize` and `tools/list`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default cap on the text of one tool result, in characters.
pub const DEFAULT_MAX_RESULT_CHARS: usize = 100_000;
/// Default number of restarts after a failed start or a crash.
pub const DEFAULT_MAX_RESTARTS: u32 = 3;

/// The environment variable that carries the user id to a per-user stdio server
/// ([`McpServerConfig::session_per_user`]).
pub const USER_ENV: &str = "TRELLIS_MCP_USER_ID";
/// The header that carries the user id to a per-user HTTP server, on every request.
pub const USER_HEADER: &str = "x-trellis-user-id";

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpTransport {
    /// A child process speaking MCP over stdin/stdout.
    Stdio(StdioServer),
    /// A streamable-HTTP endpoint.
    Http(HttpServer),
}

/// A server started as a child process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioServer {
    /// The program (looked up on `PATH` when it has no `/`).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables set for the server. The server gets only these, the variables named
    /// in `inherit_env`, and [`DEFAULT_INHERITED_ENV`] from the agent's environment — never the
    /// rest of it (API keys included).
    pub env: Vec<(String, String)>,
    /// Names of further variables passed on from the agent's environment.
    pub inherit_env: Vec<String>,
    /// Working directory (the agent's when `None`).
    pub cwd: Option<PathBuf>,
}

/// The variables a stdio server inherits from the agent's environment by default: the list the
/// official MCP SDKs use on POSIX (`DEFAULT_INHERITED_ENV_VARS` in the TypeScript SDK,
/// `get_default_environment` in the Python SDK).
pub const DEFAULT_INHERITED_ENV: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];

/// A server reached over streamable HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpServer {
    /// The endpoint, e.g. `http://127.0.0.1:8000/mcp`.
    pub url: String,
    /// Headers sent with every request.
    pub headers: Vec<(String, String)>,
    /// A bearer token sent as `Authorization: Bearer <token>`.
    pub bearer_token: Option<String>,
}

type ToolPredicate = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// One MCP server: its name (the prefix of its tools' names and the `mcp:<name>` label skills bind
/// it with), its transport, an optional filter of its tools, the roles that may use it, and limits.
#[derive(Clone)]
pub struct McpServerConfig {
    name: String,
    transport: McpTransport,
    allow_tools: Option<BTreeSet<String>>,
    tool_filter: Option<ToolPredicate>,
    required_roles: Vec<String>,
    call_timeout: Duration,
    connect_timeout: Duration,
    max_result_chars: usize,
    max_restarts: u32,
    /// `Some(max)`: one session per user, at most `max` live at once.
    per_user: Option<usize>,
}

impl fmt::Debug for McpServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServerConfig")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .field("allow_tools", &self.allow_tools)
            .field("tool_filter", &self.tool_filter.is_some())
            .field("required_roles", &self.required_roles)
            .field("call_timeout", &self.call_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("per_user", &self.per_user)
            .finish_non_exhaustive()
    }
}

impl McpServerConfig {
    /// A server `name` reached through `transport`, with the default limits and no filter or roles.
    pub fn new(name: impl Into<String>, transport: McpTransport) -> Result<Self, McpError> {
        let name = name.into();
        validate_server_name(&name)?;
        if let McpTransport::Http(http) = &transport {
            check_url(&http.url)?;
        }
        if let McpTransport::Stdio(stdio) = &transport
            && stdio.program.is_empty()
        {
            return Err(McpError::InvalidSpec {
                spec: name,
                reason: "the command is empty".to_owned(),
            });
        }
        Ok(Self {
            name,
            transport,
            allow_tools: None,
            tool_filter: None,
            required_roles: Vec::new(),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_result_chars: DEFAULT_MAX_RESULT_CHARS,
            max_restarts: DEFAULT_MAX_RESTARTS,
            per_user: None,
        })
    }

    /// A server started as `program args…`.
    pub fn stdio(
        name: impl Into<String>,
        program: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Self, McpError> {
        Self::new(
            name,
            McpTransport::Stdio(StdioServer {
                program: program.into(),
                args: args.into_iter().map(Into::into).collect(),
                env: Vec::new(),
                inherit_env: Vec::new(),
                cwd: None,
            }),
        )
    }

    /// A streamable-HTTP server at `url` (`http://` or `https://`).
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Result<Self, McpError> {
        Self::new(
            name,
            McpTransport::Http(HttpServer {
                url: url.into(),
                headers: Vec::new(),
                bearer_token: None,
            }),
        )
    }

    /// Parse a command-line specification: `NAME=http://…` or `NAME=https://…` for streamable HTTP,
    /// otherwise `NAME=COMMAND`, the command split like a POSIX shell would (quotes and backslashes;
    /// no variables, globs or pipes).
    pub fn parse_spec(spec: &str) -> Result<Self, McpError> {
        let invalid = |reason: &str| McpError::InvalidSpec {
            spec: spec.to_owned(),
            reason: reason.to_owned(),
        };
        let (name, target) = spec
            .split_once('=')
            .ok_or_else(|| invalid("expected NAME=COMMAND or NAME=URL"))?;
        let (name, target) = (name.trim(), target.trim());
        if target.is_empty() {
            return Err(invalid("nothing after '='"));
        }
        if target.starts_with("http://") || target.starts_with("https://") {
            return Self::http(name, target);
        }
        let words = shlex::split(target).ok_or_else(|| invalid("unbalanced quotes in the command"))?;
        let Some((program, args)) = words.split_first() else {
            return Err(invalid("the command is empty"));
        };
        Self::stdio(name, program.clone(), args.iter().cloned())
    }

    /// Offer only the tools with these MCP names (others are never shown or called).
    pub fn allow_tools(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.allow_tools = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Offer only the tools whose MCP name passes `keep` (combined with [`Self::allow_tools`]).
    pub fn filter_tools(mut self, keep: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.tool_filter = Some(Arc::new(keep));
        self
    }

    /// Only users holding at least one of `roles` see or run this server's tools. A run without an
    /// identity (no [`Viewer`] or `UserIdentity` extension) holds no roles.
    pub fn required_roles(mut self, roles: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.required_roles = roles.into_iter().map(Into::into).collect();
        self
    }

    /// How long a tool call may take before it is cancelled (default 60 s).
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// How long starting may take: spawn or connect, `initialize`, `tools/list` (default 30 s).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Most characters of text one tool result may return; longer results are cut with a note.
    pub fn with_max_result_chars(mut self, chars: usize) -> Self {
        self.max_result_chars = chars.max(1);
        self
    }

    /// How often the server is started again after a failed start or a crash (default 3).
    pub fn with_max_restarts(mut self, restarts: u32) -> Self {
        self.max_restarts = restarts;
        self
    }

    /// One session per user instead of one shared by everyone: each user id gets its own server
    /// process (stdio, with [`USER_ENV`] set to the id) or its own HTTP session (with the
    /// [`USER_HEADER`] header on every request). At most `max_sessions` (at least 1) are live at
    /// once; starting one more stops the least recently used. A run without a user id gets no tools
    /// from such a server. The server learns the id from the agent: over HTTP it must authenticate
    /// the agent (a bearer token) and trust it to speak for its users.
    pub fn session_per_user(mut self, max_sessions: usize) -> Self {
        self.per_user = Some(max_sessions.max(1));
        self
    }

    /// `Some(max)` for a per-user server ([`Self::session_per_user`]).
    pub fn per_user_sessions(&self) -> Option<usize> {
        self.per_user
    }

    /// This configuration for the session of `user`: the user id in the environment (stdio) or in
    /// a header (HTTP).
    pub(crate) fn for_user(&self, user: &str) -> Self {
        match &self.transport {
            McpTransport::Stdio(_) => self.clone().env(USER_ENV, user),
            McpTransport::Http(_) => self.clone().header(USER_HEADER, user),
        }
    }

    /// Add an environment variable (stdio servers; ignored for HTTP).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Stdio(s) = &mut self.transport {
            s.env.push((key.into(), value.into()));
        }
        self
    }

    /// Pass the agent's variable `name` on to the server (stdio servers; ignored for HTTP).
    pub fn inherit_env(mut self, name: impl Into<String>) -> Self {
        if let McpTransport::Stdio(s) = &mut self.transport {
            s.inherit_env.push(name.into());
        }
        self
    }

    /// Set the working directory (stdio servers; ignored for HTTP).
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        if let McpTransport::Stdio(s) = &mut self.transport {
            s.cwd = Some(dir.into());
        }
        self
    }

    /// Add a header sent with every request (HTTP servers; ignored for stdio).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Http(h) = &mut self.transport {
            h.headers.push((name.into(), value.into()));
        }
        self
    }

    /// Send `Authorization: Bearer <token>` (HTTP servers; ignored for stdio).
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        if let McpTransport::Http(h) = &mut self.transport {
            h.bearer_token = Some(token.into());
        }
        self
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How the server is reached.
    pub fn transport(&self) -> &McpTransport {
        &self.transport
    }

    /// The call timeout.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The cap on one result's text.
    pub fn max_result_chars(&self) -> usize {
        self.max_result_chars
    }

    /// The restart budget.
    pub fn max_restarts(&self) -> u32 {
        self.max_restarts
    }

    /// True when the tool with MCP name `tool` passes the allow-list and the filter.
    pub fn offers(&self, tool: &str) -> bool {
        self.allow_tools.as_ref().is_none_or(|a| a.contains(tool))
            && self.tool_filter.as_ref().is_none_or(|keep| keep(tool))
    }

    /// True when `viewer` may see and run this server's tools.
    pub fn admits(&self, viewer: Option<&Viewer>) -> bool {
        self.required_roles.is_empty()
            || viewer.is_some_and(|v| self.required_roles.iter().any(|r| v.has_role(r)))
    }

    /// True when the run's identity may see and run this server's tools.
    pub fn admits_run(&self, cx: &RunContext) -> bool {
        self.admits(viewer(cx).as_ref())
    }
}

/// The run's identity, read the way the skills middleware reads it: a [`Viewer`] extension, else a
/// `trellis_middleware::tools::UserIdentity`.
pub fn viewer(cx: &RunContext) -> Option<Viewer> {
    if let Some(v) = cx.extension::<Viewer>() {
        return Some(v.clone());
    }
    cx.extension::<trellis_middleware::tools::UserIdentity>()
        .map(|u| Viewer::new(u.user_id.clone(), u.roles.iter().cloned()))
}

fn check_url(url: &str) -> Result<(), McpError> {
    let parsed = url::Url::parse(url).map_err(|e| McpError::InvalidSpec {
        spec: url.to_owned(),
        reason: format!("not a URL: {e}"),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(McpError::InvalidSpec {
            spec: url.to_owned(),
            reason: "expected an http:// or https:// URL with a host".to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_like_a_shell() {
        let c = McpServerConfig::parse_spec("crm=python3 'my server.py' --name \"a b\"").unwrap();
        assert_eq!(c.name(), "crm");
        let McpTransport::Stdio(s) = c.transport() else {
            panic!()
        };
        assert_eq!(s.program, "python3");
        assert_eq!(s.args, ["my server.py", "--name", "a b"]);

        let c = McpServerConfig::parse_spec("docs=http://127.0.0.1:9000/mcp").unwrap();
        assert!(matches!(c.transport(), McpTransport::Http(h) if h.url == "http://127.0.0.1:9000/mcp"));

        for bad in [
            "crm",
            "crm=",
            "=python3",
            "crm=python3 'open",
            "bad name=x",
            "a__b=x",
            "w=http://",
        ] {
            assert!(McpServerConfig::parse_spec(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn filters_and_roles() {
        let c = McpServerConfig::stdio("crm", "x", ["y"])
            .unwrap()
            .allow_tools(["a", "b"])
            .filter_tools(|t| t != "b")
            .required_roles(["sales", "admin"]);
        assert!(c.offers("a") && !c.offers("b") && !c.offers("c"));
        assert!(c.admits(Some(&Viewer::new("u", ["admin"]))));
        assert!(!c.admits(Some(&Viewer::new("u", ["guest"]))));
        assert!(!c.admits(None), "no identity, no roles");
        let open = McpServerConfig::stdio("crm", "x", Vec::<String>::new()).unwrap();
        assert!(open.admits(None) && open.offers("anything"));
    }
}
