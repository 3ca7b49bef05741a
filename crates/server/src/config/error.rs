//! Configuration errors, and turning byte offsets into line numbers.

use std::fmt;
use std::io;
use std::ops::Range;
use std::path::PathBuf;

/// Why a configuration was rejected.
///
/// `Display` gives one line per problem, `ORIGIN:LINE: problem` (or
/// `ORIGIN: problem` when the problem is not on any one line). A problem
/// reported by the TOML parser is followed by the offending line with the
/// position marked.
#[derive(Debug)]
pub enum ConfigError {
    /// The file could not be read.
    Read { path: PathBuf, source: io::Error },
    /// The file was read but is not a valid configuration. There is at least
    /// one problem; they are in file order.
    Invalid { origin: String, problems: Vec<Problem> },
}

/// One thing wrong with a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line the problem is on, if it is on one.
    pub line: Option<usize>,
    pub message: String,
    /// The offending line with the position marked (for errors reported by
    /// the TOML parser, whose messages do not always quote the bad text).
    pub snippet: Option<String>,
}

impl ConfigError {
    /// The problems found in the file (empty if it could not be read).
    #[cfg(test)]
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Read { .. } => &[],
            ConfigError::Invalid { problems, .. } => problems,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { path, source } => {
                write!(f, "{}: cannot read the configuration file: {source}", path.display())
            }
            ConfigError::Invalid { origin, problems } => {
                for (i, p) in problems.iter().enumerate() {
                    if i > 0 {
                        writeln!(f)?;
                    }
                    match p.line {
                        Some(line) => write!(f, "{origin}:{line}: {}", p.message)?,
                        None => write!(f, "{origin}: {}", p.message)?,
                    }
                    if let Some(snippet) = &p.snippet {
                        write!(f, "\n{snippet}")?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// No source: `Display` already says why the file could not be read
/// (anyhow's `{:#}` would say it twice).
impl std::error::Error for ConfigError {}

/// The 1-based line that byte `offset` of `text` is on. Offsets past the
/// end count as the last line.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end].iter().filter(|&&b| b == b'\n').count() + 1
}

/// The line holding `span.start`, with the span marked below it:
///
/// ```text
///   |
/// 3 | workers = "many"
///   |           ^^^^^^
/// ```
pub(super) fn snippet(text: &str, span: &Range<usize>) -> Option<String> {
    let mut start = span.start.min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let content = text[line_start..line_end].trim_end_matches('\r');
    if content.trim().is_empty() {
        return None;
    }
    // Keep tabs so the marker lines up under tab-indented text.
    let pad: String = text[line_start..start].chars().map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
    let marked = span.end.clamp(start, line_end);
    let width = text.get(start..marked).map_or(0, |s| s.chars().count()).max(1);
    let number = line_of(text, start).to_string();
    let gutter = " ".repeat(number.len());
    Some(format!("{gutter} |\n{number} | {content}\n{gutter} | {pad}{}", "^".repeat(width)))
}

/// A problem reported by the toml crate (syntax, type, unknown key), placed
/// on its line and, where a common mistake is recognisable, with a hint.
pub(super) fn from_toml(text: &str, err: &toml::de::Error) -> Problem {
    let mut message = err.message().trim().replace('\n', "; ");
    let span = err.span();
    let spanned_text = span.as_ref().and_then(|s| text.get(s.clone())).unwrap_or("");
    if let Some(hint) = hint(&message, spanned_text) {
        message.push_str("; ");
        message.push_str(hint);
    }
    Problem {
        line: span.as_ref().map(|s| line_of(text, s.start)),
        message,
        snippet: span.as_ref().and_then(|s| snippet(text, s)),
    }
}

/// Advice for mistakes an administrator used to /etc/exports is likely to
/// make.
fn hint(message: &str, spanned_text: &str) -> Option<&'static str> {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let key = rest.split('`').next().unwrap_or("");
        return match key {
            "async" => Some("exports(5) `async` is written `sync = false` here"),
            "rw" | "ro" => Some("write `access = \"rw\"` or `access = \"ro\"`"),
            "root_squash" | "no_root_squash" | "all_squash" => {
                Some("write `squash = \"root_squash\"`, `\"no_root_squash\"` or `\"all_squash\"`")
            }
            "subtree_check" | "no_subtree_check" => Some("Keel never does subtree checking; remove this key"),
            "client" => Some("the key is `clients`"),
            "host" | "hosts" => Some(
                "each client goes in its own [[export.clients]] table, e.g. \
                 [[export.clients]] host = \"10.1.0.0/16\"",
            ),
            "exports" => Some("each export is a table headed [[export]]"),
            _ => None,
        };
    }
    if message.starts_with("invalid basic string") || message.starts_with("invalid literal string") {
        return Some("is the closing quote missing? A string must end on the line it starts on");
    }
    if message.contains("expected a sequence") {
        if spanned_text.starts_with('[') && !spanned_text.starts_with("[[") {
            return Some(
                "export and client tables take double brackets: [[export]] and \
                 [[export.clients]], one per entry",
            );
        }
        return Some("write a list in square brackets, e.g. [\"0.0.0.0:2049\"]");
    }
    None
}
