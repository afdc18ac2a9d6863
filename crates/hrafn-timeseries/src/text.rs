//! Text formats: series selectors, the Prometheus text exposition format and CSV.
//!
//! # Selectors
//!
//! [`parse_selector`] reads the vector-selector subset of PromQL: an optional metric name
//! followed by an optional brace list of matchers, such as
//! `http_requests_total{job="api",code=~"5..",path!~"/health.*"}`. Strings may be written
//! with double quotes, single quotes (both with the escapes `\\`, `\"`, `\'`, `\n` and
//! `\t`) or backticks (raw, no escapes). Ranges, offsets and functions are not part of it.
//!
//! # Exposition format
//!
//! [`parse_exposition`] reads lines of the form `metric{name="value",...} value [timestamp]`,
//! skipping blank lines and lines starting with `#` (`# HELP`, `# TYPE`, comments and the
//! OpenMetrics `# EOF`). Values are floats in Rust's syntax or `NaN`, `+Inf`, `-Inf` and
//! `Inf`. The timestamp is an integer count of milliseconds since the Unix epoch, as in
//! the Prometheus text format; OpenMetrics timestamps (seconds with a fraction) are
//! refused. Text after the value or timestamp that starts with `#` (an OpenMetrics
//! exemplar) is ignored. A series whose metric name is not a valid metric name is written
//! and read in the brace-only form `{__name__="name",...}`.
//!
//! # CSV
//!
//! [`parse_csv`] and [`write_csv`] use this layout (RFC 4180 quoting, `\n` line ends on
//! output, `\r\n` accepted on input):
//!
//! ```text
//! series,timestamp_ms,value
//! "http_requests_total{code=""200"",job=""api""}",1700000000000,1027
//! ```
//!
//! `series` is the series in exposition syntax, `timestamp_ms` milliseconds since the Unix
//! epoch and `value` a float written as in the exposition format.
//!
//! # Values
//!
//! The writers print finite values so that they read back to the same bits. Every NaN is
//! written as `NaN` and reads back as [`f64::NAN`]: a NaN payload does not survive text.
//! As in Prometheus, a label with an empty value is the same as no label, so it is dropped
//! on input.

use crate::chunk::Sample;
use crate::error::{Error, Result};
use crate::labels::{Labels, METRIC_NAME, valid_name, write_quoted};
use std::fmt;
use std::io::{BufRead, Write};

/// How a [`Matcher`] compares a label value with its own value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatchOp {
    /// `=`: the label value equals the matcher value.
    Equal,
    /// `!=`: the label value differs from the matcher value.
    NotEqual,
    /// `=~`: the whole label value matches the regex.
    RegexMatch,
    /// `!~`: the whole label value does not match the regex.
    RegexNoMatch,
}

/// The operator as PromQL writes it.
impl fmt::Display for MatchOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MatchOp::Equal => "=",
            MatchOp::NotEqual => "!=",
            MatchOp::RegexMatch => "=~",
            MatchOp::RegexNoMatch => "!~",
        })
    }
}

/// One condition of a selector on one label, such as `job="api"` or `code=~"5.."`.
///
/// The fields are public for reading; [`Matcher::matches`] uses the regex compiled by
/// [`Matcher::new`], so build a new matcher rather than editing one.
#[derive(Clone, Debug)]
pub struct Matcher {
    /// The label name.
    pub name: String,
    /// The comparison.
    pub op: MatchOp,
    /// The value or, for the regex operators, the regex source as written.
    pub value: String,
    /// The anchored regex, for the regex operators.
    regex: Option<regex::Regex>,
}

impl Matcher {
    /// Builds a matcher. Regexes are anchored at both ends and `.` matches any character
    /// including a newline, as in Prometheus: `a=~"b"` matches the value `b` but not `ab`.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] for a name that is not a valid label name or a regex that
    /// does not compile.
    pub fn new(name: impl Into<String>, op: MatchOp, value: impl Into<String>) -> Result<Matcher> {
        let name = name.into();
        let value = value.into();
        if !valid_name(&name) {
            return Err(Error::InvalidQuery(format!(
                "bad label name {:?}",
                snippet(&name)
            )));
        }
        let regex = match op {
            MatchOp::Equal | MatchOp::NotEqual => None,
            MatchOp::RegexMatch | MatchOp::RegexNoMatch => {
                let bad = |e: regex::Error| {
                    Error::InvalidQuery(format!("bad regex {:?}: {e}", snippet(&value)))
                };
                // Alone first: a pattern such as `x)|(y` would close the wrapping group
                // and escape the anchors.
                regex::Regex::new(&value).map_err(bad)?;
                // As Prometheus wraps it: `.` matches a newline too.
                Some(regex::Regex::new(&format!("^(?s:{value})$")).map_err(bad)?)
            }
        };
        Ok(Matcher {
            name,
            op,
            value,
            regex,
        })
    }

    /// Whether a series whose label `name` has `label_value` passes this matcher. A
    /// missing label (`None`) behaves as the empty string, as in Prometheus.
    pub fn matches(&self, label_value: Option<&str>) -> bool {
        let actual = label_value.unwrap_or_default();
        match self.op {
            MatchOp::Equal => actual == self.value,
            MatchOp::NotEqual => actual != self.value,
            MatchOp::RegexMatch => self.regex_matches(actual),
            MatchOp::RegexNoMatch => !self.regex_matches(actual),
        }
    }

    /// Whether the matcher accepts the empty string, so also every series without the
    /// label.
    pub fn matches_empty(&self) -> bool {
        self.matches(None)
    }

    fn regex_matches(&self, actual: &str) -> bool {
        // Only a matcher whose `op` was edited after `new` lacks its regex; treat the
        // value literally rather than fail.
        match &self.regex {
            Some(regex) => regex.is_match(actual),
            None => actual == self.value,
        }
    }
}

/// Equal when name, operator and value are equal (the compiled regex follows from them).
impl PartialEq for Matcher {
    fn eq(&self, other: &Matcher) -> bool {
        self.name == other.name && self.op == other.op && self.value == other.value
    }
}

impl Eq for Matcher {}

/// `name="value"`, with the operator and the value quoted as PromQL reads it.
impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.name, self.op)?;
        write_quoted(f, &self.value)
    }
}

/// Parses a PromQL vector selector into its matchers; a metric name becomes an
/// [`MatchOp::Equal`] matcher on `__name__`, placed first.
///
/// # Errors
/// [`Error::Parse`] (line 1, or the line of a multi-line selector) for bad syntax: an
/// unterminated string, an unknown operator or escape, a bad label name, the metric name
/// given both before and inside the braces, trailing text. [`Error::InvalidQuery`] for a
/// bad regex and for the selectors [`check_selector`] refuses.
pub fn parse_selector(text: &str) -> Result<Vec<Matcher>> {
    let mut cur = Cursor::new(text, 1);
    let mut matchers = Vec::new();
    cur.skip_ws();
    let metric = cur.name(true);
    if let Some(name) = metric {
        matchers.push(Matcher::new(METRIC_NAME, MatchOp::Equal, name)?);
    }
    cur.skip_ws();
    if cur.eat('{') {
        cur.label_list(|cur, name, start| {
            if metric.is_some() && name == METRIC_NAME {
                // Prometheus refuses `up{__name__="x"}` too: which name would win?
                return Err(cur.err_at(start, "the metric name is given twice"));
            }
            let op = cur.match_op()?;
            cur.skip_ws();
            let value = cur.quoted(Quoting::Selector)?;
            matchers.push(Matcher::new(name, op, value)?);
            Ok(())
        })?;
        cur.skip_ws();
    }
    if !cur.at_end() {
        return Err(cur.err(format!("unexpected text {:?}", snippet(cur.rest()))));
    }
    check_selector(&matchers)?;
    Ok(matchers)
}

/// Checks that a selector can run: it has a matcher, and at least one of its matchers
/// does not match the empty string (otherwise it would select every series, the rule
/// Prometheus applies).
///
/// # Errors
/// [`Error::InvalidQuery`] when either condition fails.
pub fn check_selector(matchers: &[Matcher]) -> Result<()> {
    if matchers.is_empty() {
        return Err(Error::InvalidQuery(
            "empty selector: give a metric name or a matcher".to_string(),
        ));
    }
    if matchers.iter().all(Matcher::matches_empty) {
        return Err(Error::InvalidQuery(
            "a selector needs at least one matcher that does not match the empty string"
                .to_string(),
        ));
    }
    Ok(())
}

/// One sample read from text, with the series it belongs to.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedSample {
    /// The series.
    pub labels: Labels,
    /// The timestamp and value.
    pub sample: Sample,
}

/// Reads the Prometheus text exposition format line by line, passing each sample to
/// `each`. A sample without a timestamp gets `default_timestamp_ms`. See the
/// [module documentation](self) for the accepted syntax.
///
/// Returns the number of samples passed to `each`.
///
/// # Errors
/// [`Error::Parse`] with the 1-based line number for a line that does not parse (bad
/// syntax, invalid labels, input that is not UTF-8), [`Error::Io`] when reading fails,
/// and any error `each` returns, which stops the parse.
pub fn parse_exposition(
    mut input: impl BufRead,
    default_timestamp_ms: i64,
    mut each: impl FnMut(ParsedSample) -> Result<()>,
) -> Result<u64> {
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    let mut count = 0u64;
    loop {
        buf.clear();
        if input.read_until(b'\n', &mut buf)? == 0 {
            return Ok(count);
        }
        line_no += 1;
        let line = utf8_line(&buf, line_no)?;
        if let Some(parsed) = exposition_line(line, line_no, default_timestamp_ms)? {
            each(parsed)?;
            count += 1;
        }
    }
}

/// Writes `samples` of the series `labels` in the exposition format, one line
/// `metric{name="value",...} value timestamp_ms` per sample.
///
/// # Errors
/// [`Error::Io`] when writing fails.
pub fn write_exposition(out: &mut impl Write, labels: &Labels, samples: &[Sample]) -> Result<()> {
    let series = SeriesText(labels).to_string();
    for sample in samples {
        writeln!(
            out,
            "{series} {} {}",
            ValueText(sample.value),
            sample.timestamp_ms
        )?;
    }
    Ok(())
}

/// The CSV header line, without its line end.
const CSV_HEADER: [&str; 3] = ["series", "timestamp_ms", "value"];

/// Reads the CSV layout described in the [module documentation](self), passing each
/// sample to `each`. The header line is required; blank lines are skipped; a quoted field
/// may span lines.
///
/// Returns the number of samples passed to `each`.
///
/// # Errors
/// [`Error::Parse`] with the 1-based line number (where the record starts) for a missing
/// or wrong header, a record that is not three fields, a broken quoted field, a bad
/// series, timestamp or value, or input that is not UTF-8; [`Error::Io`] when reading
/// fails; and any error `each` returns, which stops the parse.
pub fn parse_csv(
    mut input: impl BufRead,
    mut each: impl FnMut(ParsedSample) -> Result<()>,
) -> Result<u64> {
    let mut buf = Vec::new();
    let mut record = String::new();
    let mut quotes = 0usize;
    let mut line_no = 0usize;
    let mut record_line = 1usize;
    let mut seen_header = false;
    let mut count = 0u64;
    loop {
        buf.clear();
        if input.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        line_no += 1;
        let line = utf8_line(&buf, line_no)?;
        if record.is_empty() {
            record_line = line_no;
        }
        record.push_str(line);
        // Quotes come in pairs in a well-formed record, so an odd count means a quoted
        // field goes on past this line end. Counting keeps a long broken record linear.
        quotes += line.bytes().filter(|&b| b == b'"').count();
        if quotes % 2 == 1 {
            record.push('\n');
            continue;
        }
        let fields = split_csv(&record).map_err(|message| Error::Parse {
            line: record_line,
            message,
        })?;
        record.clear();
        quotes = 0;
        if fields.len() == 1 && fields[0].trim().is_empty() {
            continue;
        }
        if !seen_header {
            if fields != CSV_HEADER {
                return Err(Error::Parse {
                    line: record_line,
                    message: format!("expected the header {:?}", CSV_HEADER.join(",")),
                });
            }
            seen_header = true;
            continue;
        }
        each(csv_record(&fields, record_line)?)?;
        count += 1;
    }
    if !record.is_empty() {
        return Err(Error::Parse {
            line: record_line,
            message: "unterminated quoted field".to_string(),
        });
    }
    if !seen_header {
        return Err(Error::Parse {
            line: line_no.max(1),
            message: format!("missing the header {:?}", CSV_HEADER.join(",")),
        });
    }
    Ok(count)
}

/// Writes the CSV header line `series,timestamp_ms,value`.
///
/// # Errors
/// [`Error::Io`] when writing fails.
pub fn write_csv_header(out: &mut impl Write) -> Result<()> {
    writeln!(out, "{}", CSV_HEADER.join(","))?;
    Ok(())
}

/// Writes `samples` of the series `labels` as CSV records (no header; see
/// [`write_csv_header`]).
///
/// # Errors
/// [`Error::Io`] when writing fails.
pub fn write_csv(out: &mut impl Write, labels: &Labels, samples: &[Sample]) -> Result<()> {
    let series = SeriesText(labels).to_string().replace('"', "\"\"");
    for sample in samples {
        writeln!(
            out,
            "\"{series}\",{},{}",
            sample.timestamp_ms,
            ValueText(sample.value)
        )?;
    }
    Ok(())
}

/// Parses a series written in exposition syntax, `metric{name="value",...}` (or the
/// brace-only form `{__name__="metric",...}`). Whitespace around it is allowed.
///
/// # Errors
/// [`Error::Parse`] (line 1) for bad syntax or a label set [`Labels::new`] refuses.
pub fn parse_series(text: &str) -> Result<Labels> {
    let mut cur = Cursor::new(text, 1);
    cur.skip_ws();
    let labels = series(&mut cur)?;
    cur.skip_ws();
    if !cur.at_end() {
        return Err(cur.err(format!("unexpected text {:?}", snippet(cur.rest()))));
    }
    Ok(labels)
}

/// Decodes one input line, without its line end.
fn utf8_line(buf: &[u8], line: usize) -> Result<&str> {
    let text = std::str::from_utf8(buf).map_err(|_| Error::Parse {
        line,
        message: "not UTF-8".to_string(),
    })?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    // A byte-order mark some editors put first is not part of the data.
    Ok(if line == 1 {
        text.strip_prefix('\u{feff}').unwrap_or(text)
    } else {
        text
    })
}

/// Parses one exposition line; `None` for a blank or comment line.
fn exposition_line(line: &str, line_no: usize, default_ts: i64) -> Result<Option<ParsedSample>> {
    let mut cur = Cursor::new(line, line_no);
    cur.skip_ws();
    if cur.at_end() || cur.peek() == Some('#') {
        return Ok(None);
    }
    let labels = series(&mut cur)?;
    if !cur.skip_ws() {
        return Err(cur.err("expected whitespace and a value after the series"));
    }
    if cur.at_end() {
        return Err(cur.err("missing value"));
    }
    let start = cur.pos;
    let token = cur.token();
    let value = parse_value(token)
        .ok_or_else(|| cur.err_at(start, format!("bad value {:?}", snippet(token))))?;
    cur.skip_ws();
    let timestamp_ms = if cur.at_end() || cur.peek() == Some('#') {
        default_ts
    } else {
        let start = cur.pos;
        let token = cur.token();
        let ts = token.parse::<i64>().map_err(|_| {
            cur.err_at(
                start,
                format!(
                    "bad timestamp {:?} (expected integer milliseconds)",
                    snippet(token)
                ),
            )
        })?;
        cur.skip_ws();
        if !cur.at_end() && cur.peek() != Some('#') {
            return Err(cur.err(format!(
                "unexpected text {:?} after the timestamp",
                snippet(cur.rest())
            )));
        }
        ts
    };
    Ok(Some(ParsedSample {
        labels,
        sample: Sample {
            timestamp_ms,
            value,
        },
    }))
}

/// Turns the three fields of a CSV record into a sample.
fn csv_record(fields: &[String], line: usize) -> Result<ParsedSample> {
    let bad = |message: String| Error::Parse { line, message };
    let [series, ts, value] = fields else {
        return Err(bad(format!("expected 3 fields, found {}", fields.len())));
    };
    let labels = parse_series(series).map_err(|e| match e {
        Error::Parse { message, .. } => bad(format!("series: {message}")),
        other => other,
    })?;
    let timestamp_ms = ts.trim().parse::<i64>().map_err(|_| {
        bad(format!(
            "bad timestamp {:?} (expected integer milliseconds)",
            snippet(ts)
        ))
    })?;
    let value =
        parse_value(value.trim()).ok_or_else(|| bad(format!("bad value {:?}", snippet(value))))?;
    Ok(ParsedSample {
        labels,
        sample: Sample {
            timestamp_ms,
            value,
        },
    })
}

/// Splits one CSV record (RFC 4180 quoting) into its fields.
fn split_csv(record: &str) -> std::result::Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut chars = record.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err("unterminated quoted field".to_string()),
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                }
            }
            fields.push(field);
            match chars.next() {
                None => return Ok(fields),
                Some(',') => {}
                Some(c) => {
                    return Err(format!(
                        "unexpected {c:?} after the closing quote of field {}",
                        fields.len()
                    ));
                }
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field);
                        return Ok(fields);
                    }
                    Some(',') => break,
                    Some('"') => {
                        return Err(format!(
                            "a quote inside unquoted field {}",
                            fields.len() + 1
                        ));
                    }
                    Some(c) => field.push(c),
                }
            }
            fields.push(field);
        }
    }
}

/// Parses a sample value: a float in Rust's syntax, or `NaN`, `+Inf`, `-Inf`, `Inf`.
fn parse_value(token: &str) -> Option<f64> {
    match token {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => token.parse::<f64>().ok(),
    }
}

/// Whether `name` is a valid metric name: a label name that may also contain `:`.
fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// At most the first 40 characters of `text`, to keep error messages short.
fn snippet(text: &str) -> &str {
    match text.char_indices().nth(40) {
        Some((end, _)) => text.get(..end).unwrap_or(text),
        None => text,
    }
}

/// A value as the writers print it: the shortest text that reads back to the same bits,
/// in plain notation for moderate magnitudes and scientific notation otherwise (so
/// neither `1e300` nor the smallest subnormals print hundreds of digits).
struct ValueText(f64);

impl fmt::Display for ValueText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v.is_nan() {
            f.write_str("NaN")
        } else if v == f64::INFINITY {
            f.write_str("+Inf")
        } else if v == f64::NEG_INFINITY {
            f.write_str("-Inf")
        } else if v == 0.0 || (1e-4..1e21).contains(&v.abs()) {
            write!(f, "{v}")
        } else {
            write!(f, "{v:e}")
        }
    }
}

/// A series as the writers print it: `metric{...}`, or `{__name__="...",...}` when the
/// metric name would not read back as one.
struct SeriesText<'a>(&'a Labels);

impl fmt::Display for SeriesText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.0.metric_name();
        if valid_metric_name(name) {
            return write!(f, "{}", self.0);
        }
        write!(f, "{{{METRIC_NAME}=")?;
        write_quoted(f, name)?;
        for (n, v) in self.0.iter().filter(|(n, _)| *n != METRIC_NAME) {
            write!(f, ",{n}=")?;
            write_quoted(f, v)?;
        }
        f.write_str("}")
    }
}

/// Parses a series at the cursor: a metric name and/or a brace list of labels.
fn series(cur: &mut Cursor<'_>) -> Result<Labels> {
    let start = cur.pos;
    let mut pairs: Vec<(&str, String)> = Vec::new();
    if let Some(name) = cur.name(true) {
        pairs.push((METRIC_NAME, name.to_string()));
    }
    let before_ws = cur.pos;
    cur.skip_ws();
    if cur.eat('{') {
        cur.label_list(|cur, name, _| {
            if !cur.eat('=') {
                return Err(cur.err("expected '='"));
            }
            cur.skip_ws();
            let value = cur.quoted(Quoting::Exposition)?;
            pairs.push((name, value));
            Ok(())
        })?;
    } else if pairs.is_empty() {
        return Err(cur.err("expected a metric name or '{'"));
    } else {
        // The whitespace belongs to what follows the series.
        cur.pos = before_ws;
    }
    Labels::new(pairs).map_err(|e| cur.err_at(start, e))
}

/// Which quotes and escapes a string may use.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Quoting {
    /// PromQL: `"..."` and `'...'` with `\\ \" \' \n \t`, and raw `` `...` ``.
    Selector,
    /// The exposition format: `"..."` with `\\ \" \n`.
    Exposition,
}

/// A position in one piece of text being parsed.
struct Cursor<'a> {
    text: &'a str,
    /// Byte offset, always on a character boundary.
    pos: usize,
    /// The line errors report.
    line: usize,
}

impl<'a> Cursor<'a> {
    /// Reads `name <item> (, name <item>)* [,] }` after an opening `{`: `item` gets each
    /// label name (whitespace after it skipped) and where it started, and reads the rest.
    fn label_list(
        &mut self,
        mut item: impl FnMut(&mut Self, &'a str, usize) -> Result<()>,
    ) -> Result<()> {
        loop {
            self.skip_ws();
            if self.eat('}') {
                return Ok(());
            }
            let start = self.pos;
            let Some(name) = self.name(false) else {
                return Err(self.err("expected a label name"));
            };
            self.skip_ws();
            item(self, name, start)?;
            self.skip_ws();
            if self.eat(',') {
                continue;
            }
            if self.eat('}') {
                return Ok(());
            }
            return Err(self.err("expected ',' or '}'"));
        }
    }

    fn new(text: &'a str, line: usize) -> Cursor<'a> {
        Cursor { text, pos: 0, line }
    }

    fn rest(&self) -> &'a str {
        self.text.get(self.pos..).unwrap_or_default()
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn eat(&mut self, c: char) -> bool {
        let found = self.peek() == Some(c);
        if found {
            self.pos += c.len_utf8();
        }
        found
    }

    fn at_end(&self) -> bool {
        self.rest().is_empty()
    }

    /// Skips ASCII whitespace; whether there was any.
    fn skip_ws(&mut self) -> bool {
        let start = self.pos;
        while matches!(self.peek(), Some(c) if c.is_ascii_whitespace()) {
            self.pos += 1;
        }
        self.pos > start
    }

    /// Everything up to the next whitespace.
    fn token(&mut self) -> &'a str {
        let start = self.pos;
        while matches!(self.peek(), Some(c) if !c.is_ascii_whitespace()) {
            self.bump();
        }
        self.text.get(start..self.pos).unwrap_or_default()
    }

    /// A label name or, with `metric`, a metric name (which may also contain `:`).
    fn name(&mut self, metric: bool) -> Option<&'a str> {
        let start = self.pos;
        let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || (metric && c == ':');
        match self.peek() {
            Some(c) if word(c) && !c.is_ascii_digit() => self.pos += 1,
            _ => return None,
        }
        while matches!(self.peek(), Some(c) if word(c)) {
            self.pos += 1;
        }
        self.text.get(start..self.pos)
    }

    fn match_op(&mut self) -> Result<MatchOp> {
        let rest = self.rest();
        let (op, len) = if rest.starts_with("=~") {
            (MatchOp::RegexMatch, 2)
        } else if rest.starts_with("!=") {
            (MatchOp::NotEqual, 2)
        } else if rest.starts_with("!~") {
            (MatchOp::RegexNoMatch, 2)
        } else if rest.starts_with('=') {
            (MatchOp::Equal, 1)
        } else {
            return Err(self.err("expected one of the operators =, !=, =~, !~"));
        };
        self.pos += len;
        Ok(op)
    }

    /// A quoted string, unescaped.
    fn quoted(&mut self, quoting: Quoting) -> Result<String> {
        let start = self.pos;
        let selector = quoting == Quoting::Selector;
        let quote = match self.peek() {
            Some('"') => '"',
            Some(q @ ('\'' | '`')) if selector => q,
            _ => return Err(self.err("expected a quoted string")),
        };
        self.pos += 1;
        let mut out = String::new();
        loop {
            match self.bump() {
                None => return Err(self.err_at(start, "unterminated string")),
                Some(c) if c == quote => return Ok(out),
                Some('\\') if quote != '`' => {
                    let at = self.pos;
                    let unescaped = match self.bump() {
                        Some('\\') => '\\',
                        Some('"') => '"',
                        Some('n') => '\n',
                        Some('\'') if selector => '\'',
                        Some('t') if selector => '\t',
                        Some(c) => return Err(self.err_at(at, format!("unknown escape \\{c}"))),
                        None => return Err(self.err_at(start, "unterminated string")),
                    };
                    out.push(unescaped);
                }
                Some(c) => out.push(c),
            }
        }
    }

    fn err(&self, message: impl fmt::Display) -> Error {
        self.err_at(self.pos, message)
    }

    /// A parse error at byte offset `pos`, reported as a 1-based character column.
    fn err_at(&self, pos: usize, message: impl fmt::Display) -> Error {
        let before = self.text.get(..pos).unwrap_or_default();
        let line = self.line + before.matches('\n').count();
        let column = before
            .rsplit('\n')
            .next()
            .unwrap_or_default()
            .chars()
            .count()
            + 1;
        Error::Parse {
            line,
            message: format!("{message} (column {column})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        Labels::new(pairs.iter().copied()).expect("valid labels")
    }

    fn m(name: &str, op: MatchOp, value: &str) -> Matcher {
        Matcher::new(name, op, value).expect("valid matcher")
    }

    fn error_line(err: Result<impl fmt::Debug>) -> Option<usize> {
        match err {
            Err(Error::Parse { line, .. }) => Some(line),
            _ => None,
        }
    }

    fn exposition(text: &str) -> Result<Vec<ParsedSample>> {
        let mut out = Vec::new();
        let n = parse_exposition(text.as_bytes(), 42, |s| {
            out.push(s);
            Ok(())
        })?;
        assert_eq!(n, out.len() as u64);
        Ok(out)
    }

    fn csv(text: &str) -> Result<Vec<ParsedSample>> {
        let mut out = Vec::new();
        let n = parse_csv(text.as_bytes(), |s| {
            out.push(s);
            Ok(())
        })?;
        assert_eq!(n, out.len() as u64);
        Ok(out)
    }

    #[test]
    fn selectors_of_every_form() {
        use MatchOp::*;
        let up = m(METRIC_NAME, Equal, "up");
        assert_eq!(parse_selector("up").ok(), Some(vec![up.clone()]));
        assert_eq!(parse_selector("  up{}  ").ok(), Some(vec![up.clone()]));
        assert_eq!(
            parse_selector(r#"metric{a="b",c!="d",e=~"f.*",g!~"h"}"#).ok(),
            Some(vec![
                m(METRIC_NAME, Equal, "metric"),
                m("a", Equal, "b"),
                m("c", NotEqual, "d"),
                m("e", RegexMatch, "f.*"),
                m("g", RegexNoMatch, "h"),
            ])
        );
        assert_eq!(
            parse_selector(r#"{__name__="x",job="y"}"#).ok(),
            Some(vec![m(METRIC_NAME, Equal, "x"), m("job", Equal, "y")])
        );
        assert_eq!(
            parse_selector(" up \n{ a = \"b\" ,\tc=~ 'd' , } ").ok(),
            Some(vec![
                up.clone(),
                m("a", Equal, "b"),
                m("c", RegexMatch, "d")
            ])
        );
        assert_eq!(
            parse_selector(r#"up{a="q\"\\\n\t\'", b='it\'s "x"', c=`raw\d+"'`}"#).ok(),
            Some(vec![
                up,
                m("a", Equal, "q\"\\\n\t'"),
                m("b", Equal, "it's \"x\""),
                m("c", Equal, r#"raw\d+"'"#),
            ])
        );
        assert_eq!(
            parse_selector("job:rate5m:sum").ok(),
            Some(vec![m(METRIC_NAME, Equal, "job:rate5m:sum")])
        );
        assert_eq!(
            m("a", RegexMatch, "b.*").to_string(),
            r#"a=~"b.*""#.to_string()
        );
    }

    #[test]
    fn selector_errors() {
        let parse_errors = [
            r#"up{a="b}"#,
            r#"up{a='b"}"#,
            "up{a=`b}",
            r#"up{a="b\"#,
            r#"up{a<"b"}"#,
            r#"up{a~"b"}"#,
            r#"up{a=="b"}"#,
            r#"up{a="\q"}"#,
            r#"up{1a="b"}"#,
            r#"up{a-b="c"}"#,
            r#"up{"a"="b"}"#,
            r#"up{a=b}"#,
            r#"up{a="b" c="d"}"#,
            r#"up{a="b""#,
            r#"up{__name__="x"}"#,
            "up[5m]",
            "up{} x",
            "1up",
            "{",
            "}",
        ];
        for text in parse_errors {
            assert_eq!(error_line(parse_selector(text)), Some(1), "{text:?}");
        }
        assert_eq!(error_line(parse_selector("up\n{a=\"b\" x}")), Some(2));
        let invalid = [
            r#"up{a=~"("}"#,
            r#"up{a!~"[z-a]"}"#,
            "",
            "  ",
            "{}",
            r#"{a=""}"#,
            r#"{a=~".*"}"#,
            r#"{a!="x"}"#,
            r#"{a!~"x", b=~"y|"}"#,
        ];
        for text in invalid {
            assert!(
                matches!(parse_selector(text), Err(Error::InvalidQuery(_))),
                "{text:?}"
            );
        }
        assert!(parse_selector(r#"{a=~".+"}"#).is_ok());
        assert!(parse_selector(r#"{a=~".*", b="x"}"#).is_ok());
        assert!(matches!(
            Matcher::new("1a", MatchOp::Equal, "x"),
            Err(Error::InvalidQuery(_))
        ));
        assert!(check_selector(&[]).is_err());
    }

    #[test]
    fn matching_semantics() {
        use MatchOp::*;
        assert!(m("a", Equal, "").matches(None));
        assert!(!m("a", Equal, "x").matches(None));
        assert!(m("a", NotEqual, "x").matches(None));
        assert!(!m("a", NotEqual, "").matches(None));
        assert!(m("a", RegexMatch, ".*").matches(None));
        assert!(!m("a", RegexMatch, ".+").matches(None));
        assert!(m("a", RegexNoMatch, ".+").matches(None));
        // Anchored at both ends, around the whole alternation.
        let b = m("a", RegexMatch, "b");
        assert!(b.matches(Some("b")));
        assert!(!b.matches(Some("ab")));
        assert!(!b.matches(Some("ba")));
        let alt = m("a", RegexMatch, "b|c");
        assert!(alt.matches(Some("c")));
        assert!(!alt.matches(Some("xc")));
        assert!(!alt.matches(Some("bx")));
        assert!(m("a", RegexNoMatch, "b").matches(Some("ab")));
        assert!(!m("a", RegexNoMatch, "b").matches(Some("b")));
        assert!(m("a", Equal, "x").matches(Some("x")));
        assert!(!m("a", Equal, "x").matches(Some("y")));
        assert!(m("a", Equal, "").matches_empty());
        assert!(!m("a", RegexMatch, "x").matches_empty());
        assert_eq!(m("a", RegexMatch, "x"), m("a", RegexMatch, "x"));
        assert_ne!(m("a", RegexMatch, "x"), m("a", RegexNoMatch, "x"));
    }

    #[test]
    fn regex_dot_matches_newline_as_in_prometheus() {
        let dot = m("a", MatchOp::RegexMatch, "x.y");
        assert!(dot.matches(Some("x\ny")));
        assert!(!m("a", MatchOp::RegexNoMatch, ".*").matches(Some("a\nb")));
    }

    #[test]
    fn a_regex_that_closes_its_anchoring_group_is_refused() {
        // Wrapped as is, `x)|(y` would match any value starting with `x`.
        for pattern in ["x)|(y", "x)", ")|(.*"] {
            assert!(
                matches!(
                    Matcher::new("a", MatchOp::RegexMatch, pattern),
                    Err(Error::InvalidQuery(_))
                ),
                "{pattern}"
            );
        }
    }

    #[test]
    fn exposition_round_trips_bit_exact() {
        let series = labels(&[
            ("__name__", "http_requests_total"),
            ("path", "/a\"b\\c\nd,e}"),
            ("code", "200"),
        ]);
        let values = [
            0.0,
            -0.0,
            1.0,
            -1.5,
            0.1,
            1.0 / 3.0,
            123_456_789.123,
            1e-4,
            9.99e-5,
            1e20,
            1e21,
            1e300,
            -1e-300,
            f64::MIN_POSITIVE,
            5e-324,
            f64::MAX,
            f64::MIN,
            f64::EPSILON,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        let samples: Vec<Sample> = values
            .iter()
            .enumerate()
            .map(|(i, &value)| Sample {
                timestamp_ms: [i64::MIN, -1, 0, 1_700_000_000_000, i64::MAX][i % 5],
                value,
            })
            .collect();
        let mut out = Vec::new();
        write_exposition(&mut out, &series, &samples).expect("write to a Vec");
        let text = String::from_utf8(out).expect("UTF-8 output");
        assert!(text.contains(" NaN "), "{text}");
        assert!(text.contains(" +Inf "), "{text}");
        assert!(text.contains(" -Inf "), "{text}");
        assert!(text.contains(" 1e300 "), "{text}");
        assert!(text.contains(" -0 "), "{text}");
        let back = exposition(&text).expect("parses back");
        assert_eq!(back.len(), samples.len());
        for (got, want) in back.iter().zip(&samples) {
            assert_eq!(got.labels, series);
            assert_eq!(got.sample.timestamp_ms, want.timestamp_ms);
            assert_eq!(got.sample.value.to_bits(), want.value.to_bits(), "{text}");
        }
    }

    #[test]
    fn exposition_skips_comments_and_fills_in_timestamps() {
        let text = "# HELP up Whether the target is up.\n\
                    # TYPE up gauge\n\
                    \n\
                    up{job=\"a\"} 1 1000\n   \t\n\
                    \tup{job=\"b\",} NaN\n\
                    up +Inf -5\r\n\
                    up { job = \"c\" } Inf # {trace_id=\"x\"} 1\n\
                    up{} -Inf 7 # exemplar\n\
                    up{job=\"\"} 2e3\n\
                    {__name__=\"odd name\",a=\"b\"} -0.5 3\n\
                    # EOF\n";
        let got = exposition(text).expect("parses");
        let summary: Vec<(String, i64, u64)> = got
            .iter()
            .map(|p| {
                (
                    p.labels.to_string(),
                    p.sample.timestamp_ms,
                    p.sample.value.to_bits(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (r#"up{job="a"}"#.to_string(), 1000, 1f64.to_bits()),
                (r#"up{job="b"}"#.to_string(), 42, f64::NAN.to_bits()),
                ("up".to_string(), -5, f64::INFINITY.to_bits()),
                (r#"up{job="c"}"#.to_string(), 42, f64::INFINITY.to_bits()),
                ("up".to_string(), 7, f64::NEG_INFINITY.to_bits()),
                ("up".to_string(), 42, 2000f64.to_bits()),
                (r#"odd name{a="b"}"#.to_string(), 3, (-0.5f64).to_bits()),
            ]
        );
        assert_eq!(exposition("").ok().map(|v| v.len()), Some(0));
        assert_eq!(exposition("# only\n\n").ok().map(|v| v.len()), Some(0));
    }

    #[test]
    fn exposition_errors_name_their_line() {
        let cases = [
            ("up 1\nup\n", 2),
            ("up 1\n\n# c\nup x\n", 4),
            ("up{a=\"b} 1\n", 1),
            ("up 1\nup{a=\"\\t\"} 1\n", 2),
            ("up 1 1.5\n", 1),
            ("up 1 2 3\n", 1),
            ("up{a=\"b\"}1\n", 1),
            ("up{a='b'} 1\n", 1),
            ("up{a=\"b\" 1\n", 1),
            ("up{1=\"b\"} 1\n", 1),
            ("up{a=\"1\",a=\"2\"} 1\n", 1),
            ("up{__name__=\"x\"} 1\n", 1),
            ("{a=\"b\"} 1\n", 1),
            ("{a=\"nul\0\"} 1\n", 1),
            ("\n\n1up 1\n", 3),
            ("up 1\nup 1 99999999999999999999\n", 2),
        ];
        for (text, line) in cases {
            assert_eq!(error_line(exposition(text)), Some(line), "{text:?}");
        }
        // Invalid UTF-8 anywhere on the line is refused with its line.
        let bytes: &[u8] = b"up 1\nup{a=\"\xc3\"} 1\n";
        assert_eq!(error_line(parse_exposition(bytes, 0, |_| Ok(()))), Some(2));
    }

    #[test]
    fn exposition_stops_at_the_callers_error() {
        let mut seen = 0;
        let result = parse_exposition("up 1\nup 2\nup 3\n".as_bytes(), 0, |_| {
            seen += 1;
            if seen == 2 {
                Err(Error::InvalidQuery("stop".to_string()))
            } else {
                Ok(())
            }
        });
        assert!(matches!(result, Err(Error::InvalidQuery(_))));
        assert_eq!(seen, 2);
    }

    #[test]
    fn series_parse_and_print() {
        let want = labels(&[("__name__", "up"), ("a", "x,y"), ("b", "\"\\\n")]);
        assert_eq!(parse_series(&want.to_string()).ok(), Some(want.clone()));
        assert_eq!(
            parse_series(" up { b = \"\\\"\\\\\\n\" , a=\"x,y\" , } ").ok(),
            Some(want)
        );
        assert_eq!(
            parse_series(r#"{__name__="up"}"#).ok(),
            Some(labels(&[("__name__", "up")]))
        );
        let odd = labels(&[("__name__", "a b{"), ("A", "1"), ("c", "2")]);
        let text = SeriesText(&odd).to_string();
        assert_eq!(text, r#"{__name__="a b{",A="1",c="2"}"#);
        assert_eq!(parse_series(&text).ok(), Some(odd));
        for bad in [
            "",
            "{}",
            "up x",
            "up{",
            r#"up{a="b"} x"#,
            "up{a}",
            "{a=\"b\"}",
        ] {
            assert_eq!(error_line(parse_series(bad)), Some(1), "{bad:?}");
        }
    }

    #[test]
    fn csv_round_trips() {
        let a = labels(&[("__name__", "up"), ("job", "a,\"b\"\n"), ("x", "\\")]);
        let b = labels(&[("__name__", "temp:c")]);
        let samples = [
            Sample {
                timestamp_ms: 1,
                value: 0.1,
            },
            Sample {
                timestamp_ms: -2,
                value: f64::NAN,
            },
            Sample {
                timestamp_ms: i64::MAX,
                value: -0.0,
            },
            Sample {
                timestamp_ms: 0,
                value: f64::NEG_INFINITY,
            },
        ];
        let mut out = Vec::new();
        write_csv_header(&mut out).expect("write to a Vec");
        write_csv(&mut out, &a, &samples).expect("write to a Vec");
        write_csv(&mut out, &b, &samples[..1]).expect("write to a Vec");
        let text = String::from_utf8(out).expect("UTF-8 output");
        assert!(
            text.starts_with("series,timestamp_ms,value\n\"up{"),
            "{text}"
        );
        assert!(text.contains(r#"job=""a,\""b\""\n"""#), "{text}");
        let back = csv(&text).expect("parses back");
        let want: Vec<(&Labels, &Sample)> = samples
            .iter()
            .map(|s| (&a, s))
            .chain([(&b, &samples[0])])
            .collect();
        assert_eq!(back.len(), want.len());
        for (got, (labels, sample)) in back.iter().zip(want) {
            assert_eq!(&got.labels, labels);
            assert_eq!(got.sample.timestamp_ms, sample.timestamp_ms);
            assert_eq!(got.sample.value.to_bits(), sample.value.to_bits());
        }
        // The same with CRLF line ends, a byte-order mark and blank lines.
        let crlf = format!("\u{feff}{}\r\n\r\n", text.replace('\n', "\r\n"));
        let back_crlf = csv(&crlf).expect("CRLF parses");
        assert_eq!(back_crlf.len(), back.len());
        assert_eq!(back_crlf[0].labels, a);
    }

    #[test]
    fn csv_accepts_rfc4180_variants() {
        let text = "\"series\",timestamp_ms,\"value\"\n\
                    up,5, 1.5 \n\
                    \"up{a=\"\"multi\nline\"\"}\",6,+Inf\n\
                    \"up{a=\"\"x\"\"}\",7,-3";
        let got = csv(text).expect("parses");
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].labels, labels(&[("__name__", "up")]));
        assert_eq!(got[0].sample.value.to_bits(), 1.5f64.to_bits());
        assert_eq!(got[1].labels.get("a"), Some("multi\nline"));
        assert_eq!(got[2].sample.timestamp_ms, 7);
        assert_eq!(
            csv("series,timestamp_ms,value\n").ok().map(|v| v.len()),
            Some(0)
        );
    }

    #[test]
    fn csv_errors_name_their_line() {
        let header = "series,timestamp_ms,value\n";
        let cases = [
            ("".to_string(), 1),
            ("\n".to_string(), 1),
            ("series,timestamp,value\nup,1,2\n".to_string(), 1),
            ("up,1,2\n".to_string(), 1),
            (format!("{header}up,1,2\n\"up{{a=\"\"b\"\"}}x,1,2\n"), 3),
            (format!("{header}up,1,2\n\"up,1,2\nup,1,2\n"), 3),
            (format!("{header}up,1,2\nu\"p,1,2\n"), 3),
            (format!("{header}up,1\n"), 2),
            (format!("{header}up,1,2,3\n"), 2),
            (format!("{header}up,1.5,2\n"), 2),
            (format!("{header}up,1,two\n"), 2),
            (format!("{header}\"up{{a=\"\"b}}\",1,2\n"), 2),
            (format!("{header}\"\",1,2\n"), 2),
            (format!("{header}up,1,2\r\n\r\nup x,1,2\r\n"), 4),
        ];
        for (text, line) in cases {
            assert_eq!(error_line(csv(&text)), Some(line), "{text:?}");
        }
        let bytes: &[u8] = b"series,timestamp_ms,value\nup,1,\xff\n";
        assert_eq!(error_line(parse_csv(bytes, |_| Ok(()))), Some(2));
    }

    #[test]
    fn csv_splitter() {
        let split = |s: &str| split_csv(s).ok();
        let owned = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(split(""), owned(&[""]));
        assert_eq!(split("a,,b,"), owned(&["a", "", "b", ""]));
        assert_eq!(split(r#""a""b",",","""#), owned(&["a\"b", ",", ""]));
        assert_eq!(split("\"a\nb\",c"), owned(&["a\nb", "c"]));
        assert_eq!(split("\"a"), None);
        assert_eq!(split("\"a\"b"), None);
        assert_eq!(split("a\"b"), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn parsers_never_panic_on_arbitrary_text(text in any::<String>()) {
            let _ = parse_selector(&text);
            let _ = parse_series(&text);
            let _ = parse_exposition(text.as_bytes(), 0, |_| Ok(()));
            let _ = parse_csv(text.as_bytes(), |_| Ok(()));
        }

        #[test]
        fn parsers_never_panic_on_near_miss_text(
            text in "[a-z_:{}=~!\"'`,\\\\ \t\r\n#.0-9+eE-]{0,60}"
        ) {
            let _ = parse_selector(&text);
            let _ = parse_series(&text);
            let _ = parse_exposition(text.as_bytes(), 0, |_| Ok(()));
            let header = format!("series,timestamp_ms,value\n{text}");
            let _ = parse_csv(header.as_bytes(), |_| Ok(()));
        }

        #[test]
        fn any_value_and_label_round_trip(
            bits in any::<u64>(),
            ts in any::<i64>(),
            value in "[^\\x00]{1,12}",
        ) {
            let value_f = f64::from_bits(bits);
            let series = labels(&[("__name__", "m"), ("l", &value)]);
            let sample = Sample { timestamp_ms: ts, value: value_f };
            let mut expo = Vec::new();
            write_exposition(&mut expo, &series, &[sample]).expect("write to a Vec");
            let mut table = Vec::new();
            write_csv_header(&mut table).expect("write to a Vec");
            write_csv(&mut table, &series, &[sample]).expect("write to a Vec");
            let want = if value_f.is_nan() { f64::NAN.to_bits() } else { bits };
            for got in [
                exposition(&String::from_utf8_lossy(&expo)).expect("exposition parses"),
                csv(&String::from_utf8_lossy(&table)).expect("CSV parses"),
            ] {
                prop_assert_eq!(got.len(), 1);
                prop_assert_eq!(&got[0].labels, &series);
                prop_assert_eq!(got[0].sample.timestamp_ms, ts);
                prop_assert_eq!(got[0].sample.value.to_bits(), want);
            }
        }
    }
}
