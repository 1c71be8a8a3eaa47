//! A reader for the subset of TOML that Cargo manifests use, enough to find each dependency table,
//! the dependencies it lists and the packages they name: table headers (dotted and quoted keys,
//! `target.<cfg>.` forms, `[dependencies.<name>]`), `key = value` lines, basic and literal strings,
//! multi-line strings, comments, and arrays and inline tables spanning lines. Values it does not
//! need are skipped without being interpreted. Kept in xtask so it needs no TOML crate.

use std::collections::BTreeMap;

use anyhow::{Result, bail};

/// What the checker needs from one manifest.
#[derive(Debug, Default)]
pub(crate) struct Manifest {
    pub package_name: Option<String>,
    pub dependencies: Vec<Dependency>,
}

impl Manifest {
    /// `[workspace.dependencies]` keys that name another package.
    pub fn workspace_packages(&self) -> BTreeMap<String, String> {
        self.dependencies
            .iter()
            .filter(|d| d.section_kind == SectionKind::Workspace)
            .filter_map(|d| Some((d.key.clone(), d.package.clone()?)))
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SectionKind {
    /// A dependency table of this package (normal, dev, build; any target).
    Own,
    /// `[workspace.dependencies]`.
    Workspace,
}

#[derive(Debug)]
pub(crate) struct Dependency {
    /// The section header as written (for `[dependencies.x]`, the section it belongs to).
    pub section: String,
    pub section_kind: SectionKind,
    /// The key it is listed under.
    pub key: String,
    /// `package = "…"`, when the key is a rename.
    pub package: Option<String>,
    /// `workspace = true`.
    pub workspace: bool,
}

/// Where the reader is: which table, and whether it describes one dependency.
#[derive(Debug)]
enum Table {
    Other,
    Package,
    /// A dependency table: entries are `key = spec`.
    Deps {
        header: String,
        kind: SectionKind,
    },
    /// `[dependencies.<key>]`: entries are fields of that one dependency (index into the list).
    OneDep(usize),
}

/// Read what the checker needs from a manifest's text.
pub(crate) fn parse(text: &str) -> Result<Manifest> {
    let mut manifest = Manifest::default();
    let mut table = Table::Other;
    for (line_no, line) in logical_lines(text)? {
        let at = |e: String| anyhow::anyhow!("line {line_no}: {e}");
        if let Some(rest) = line.strip_prefix('[') {
            let array = rest.starts_with('[');
            let inner = rest.trim_start_matches('[');
            let inner = inner.trim_end().trim_end_matches(']');
            let keys = split_dotted(inner).map_err(at)?;
            table = if array {
                Table::Other
            } else {
                classify(&line, &keys, &mut manifest)
            };
            continue;
        }
        let (key, value) = split_key_value(&line).map_err(at)?;
        let keys = split_dotted(key).map_err(at)?;
        match &table {
            Table::Other => {}
            Table::Package => {
                if keys == ["name"] {
                    manifest.package_name = Some(unquote(value).map_err(at)?);
                }
            }
            Table::Deps { header, kind } => {
                let mut dep = Dependency {
                    section: header.clone(),
                    section_kind: *kind,
                    key: keys[0].clone(),
                    package: None,
                    workspace: false,
                };
                match keys.get(1).map(String::as_str) {
                    None if value.starts_with('{') => {
                        for (field, v) in inline_table(value).map_err(at)? {
                            apply_field(&mut dep, &field, &v).map_err(at)?;
                        }
                    }
                    None => {}
                    Some(field) => apply_field(&mut dep, field, value).map_err(at)?,
                }
                // `a.workspace = true` and `a.features = […]` on two lines are one dependency.
                match manifest
                    .dependencies
                    .iter_mut()
                    .find(|d| d.section == dep.section && d.key == dep.key)
                {
                    Some(existing) => {
                        existing.package = existing.package.take().or(dep.package);
                        existing.workspace |= dep.workspace;
                    }
                    None => manifest.dependencies.push(dep),
                }
            }
            Table::OneDep(index) => {
                if let Some(dep) = manifest.dependencies.get_mut(*index) {
                    apply_field(dep, &keys[0], value).map_err(at)?;
                }
            }
        }
    }
    Ok(manifest)
}

/// What a table header means for the checker.
fn classify(header: &str, keys: &[String], manifest: &mut Manifest) -> Table {
    let is_deps = |k: &str| {
        matches!(
            k,
            "dependencies"
                | "dev-dependencies"
                | "dev_dependencies"
                | "build-dependencies"
                | "build_dependencies"
        )
    };
    let strs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let (kind, rest) = match strs.as_slice() {
        ["package"] => return Table::Package,
        ["workspace", "dependencies", rest @ ..] => (SectionKind::Workspace, rest),
        [d, rest @ ..] if is_deps(d) => (SectionKind::Own, rest),
        ["target", _, d, rest @ ..] if is_deps(d) => (SectionKind::Own, rest),
        _ => return Table::Other,
    };
    match rest {
        [] => Table::Deps {
            header: header.to_owned(),
            kind,
        },
        [name] => {
            // Name the section the dependency is in, not its own table.
            let section = header
                .rfind('.')
                .map_or_else(|| header.to_owned(), |dot| format!("{}]", &header[..dot]));
            manifest.dependencies.push(Dependency {
                section,
                section_kind: kind,
                key: name.to_string(),
                package: None,
                workspace: false,
            });
            Table::OneDep(manifest.dependencies.len() - 1)
        }
        _ => Table::Other,
    }
}

fn apply_field(dep: &mut Dependency, field: &str, value: &str) -> Result<(), String> {
    match field {
        "package" => dep.package = Some(unquote(value)?),
        "workspace" => dep.workspace = value.trim() == "true",
        _ => {}
    }
    Ok(())
}

/// The file as statements: comments removed, a value that spans lines (arrays, inline tables,
/// multi-line strings) joined onto one line, blank lines dropped. Each comes with its first line
/// number.
fn logical_lines(text: &str) -> Result<Vec<(usize, String)>> {
    #[derive(PartialEq)]
    enum Str {
        None,
        Basic,
        Literal,
        MultiBasic,
        MultiLiteral,
    }
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start_line = 1;
    let mut depth: i32 = 0;
    let mut state = Str::None;
    let chars: Vec<char> = text.chars().collect();
    let mut line = 1;
    let mut i = 0;
    let starts = |i: usize, s: &str| s.chars().enumerate().all(|(k, c)| chars.get(i + k) == Some(&c));
    while i < chars.len() {
        let c = chars[i];
        match state {
            Str::None => match c {
                '#' => {
                    while i < chars.len() && chars[i] != '\n' {
                        i += 1;
                    }
                    continue;
                }
                '"' if starts(i, "\"\"\"") => {
                    state = Str::MultiBasic;
                    current.push_str("\"\"\"");
                    i += 3;
                    continue;
                }
                '\'' if starts(i, "'''") => {
                    state = Str::MultiLiteral;
                    current.push_str("'''");
                    i += 3;
                    continue;
                }
                '"' => state = Str::Basic,
                '\'' => state = Str::Literal,
                '[' | '{' => depth += 1,
                ']' | '}' => depth -= 1,
                '\n' => {
                    line += 1;
                    if depth <= 0 {
                        if depth < 0 {
                            bail!("line {}: unbalanced `]` or `}}`", line - 1);
                        }
                        let statement = current.trim();
                        if !statement.is_empty() {
                            out.push((start_line, statement.to_owned()));
                        }
                        current.clear();
                        start_line = line;
                    } else {
                        current.push(' ');
                    }
                    i += 1;
                    continue;
                }
                _ => {}
            },
            Str::Basic => match c {
                '\\' => {
                    current.push(c);
                    if let Some(&next) = chars.get(i + 1) {
                        current.push(next);
                    }
                    i += 2;
                    continue;
                }
                '"' => state = Str::None,
                '\n' => bail!("line {line}: a string is not closed"),
                _ => {}
            },
            Str::Literal => match c {
                '\'' => state = Str::None,
                '\n' => bail!("line {line}: a string is not closed"),
                _ => {}
            },
            Str::MultiBasic | Str::MultiLiteral => {
                let (quote, escapes) = if state == Str::MultiBasic {
                    ("\"\"\"", true)
                } else {
                    ("'''", false)
                };
                if escapes && c == '\\' {
                    current.push(c);
                    if let Some(&next) = chars.get(i + 1) {
                        if next == '\n' {
                            line += 1;
                        }
                        current.push(next);
                    }
                    i += 2;
                    continue;
                }
                if starts(i, quote) {
                    state = Str::None;
                    current.push_str(quote);
                    i += 3;
                    continue;
                }
                if c == '\n' {
                    line += 1;
                }
            }
        }
        current.push(c);
        i += 1;
    }
    if state != Str::None {
        bail!("a string opened on line {start_line} is not closed");
    }
    if depth != 0 {
        bail!("an array or inline table opened on line {start_line} is not closed");
    }
    let statement = current.trim();
    if !statement.is_empty() {
        out.push((start_line, statement.to_owned()));
    }
    Ok(out)
}

/// Split `text` at `sep` characters that are outside strings and brackets.
fn split_top_level(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut escaped, mut from) = (0i32, None::<char>, false, 0);
    for (i, c) in text.char_indices() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' && q == '"' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '"' | '\'' => quote = Some(c),
                '[' | '{' => depth += 1,
                ']' | '}' => depth -= 1,
                c if c == sep && depth == 0 => {
                    parts.push(&text[from..i]);
                    from = i + c.len_utf8();
                }
                _ => {}
            },
        }
    }
    parts.push(&text[from..]);
    parts
}

/// `key = value` (the key may be dotted or quoted).
fn split_key_value(line: &str) -> Result<(&str, &str), String> {
    let mut parts = split_top_level(line, '=').into_iter();
    let key = parts.next().unwrap_or_default();
    let rest_start = key.len() + 1;
    if rest_start > line.len() {
        return Err(format!("expected `key = value`, found `{line}`"));
    }
    Ok((key.trim(), line[rest_start..].trim()))
}

/// `a."b.c".'d'` → `["a", "b.c", "d"]`.
fn split_dotted(key: &str) -> Result<Vec<String>, String> {
    let parts: Vec<String> = split_top_level(key, '.')
        .into_iter()
        .map(|p| {
            let p = p.trim();
            if p.starts_with('"') || p.starts_with('\'') {
                unquote(p)
            } else if p.is_empty() {
                Err(format!("empty key in `{key}`"))
            } else {
                Ok(p.to_owned())
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(parts)
}

/// The fields of `{ a = 1, b.c = "x" }` as (first key, value text).
fn inline_table(value: &str) -> Result<Vec<(String, String)>, String> {
    let inner = value
        .trim()
        .strip_prefix('{')
        .and_then(|v| v.strip_suffix('}'))
        .ok_or_else(|| format!("expected an inline table, found `{value}`"))?;
    let mut fields = Vec::new();
    for part in split_top_level(inner, ',') {
        if part.trim().is_empty() {
            continue;
        }
        let (key, value) = split_key_value(part)?;
        let keys = split_dotted(key)?;
        fields.push((keys[0].clone(), value.to_owned()));
    }
    Ok(fields)
}

/// The text of a basic (`"…"`, simple escapes) or literal (`'…'`) string.
fn unquote(value: &str) -> Result<String, String> {
    let v = value.trim();
    if let Some(inner) = v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
        return Ok(inner.to_owned());
    }
    let inner = v
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .ok_or_else(|| format!("expected a string, found `{v}`"))?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => return Err(format!("unsupported escape `\\{other}` in {v}")),
            None => return Err(format!("dangling `\\` in {v}")),
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn statements_join_across_lines_and_drop_comments() {
        let lines =
            logical_lines("a = [\n  1, # one\n  2,\n]\nb = \"\"\"\nx = [\n\"\"\"\n# c\n[t]\n").unwrap();
        let texts: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(texts, ["a = [   1,    2, ]", "b = \"\"\"\nx = [\n\"\"\"", "[t]"]);
        assert_eq!(lines.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 5, 9]);
    }

    #[test]
    fn keys_and_strings() {
        assert_eq!(split_dotted("a.\"b.c\".'d'").unwrap(), ["a", "b.c", "d"]);
        assert_eq!(unquote("\"x\\\"y\"").unwrap(), "x\"y");
        assert_eq!(unquote("'a\\b'").unwrap(), "a\\b");
        assert!(unquote("bare").is_err());
        let fields = inline_table("{ path = \"../a,b\", package = 'p', features = [\"x\", \"y\"] }").unwrap();
        assert_eq!(fields[1], ("package".to_owned(), "'p'".to_owned()));
        assert_eq!(fields.len(), 3, "commas inside strings and arrays do not split");
    }
}
