//! Reading a few fields of large MAAS objects (API_REFERENCE §1 "Responses", §3.3): a machine
//! object of a list is about 28 KB of pretty-printed JSON — block devices, NUMA nodes,
//! interfaces with their links and VLANs — of which observation reads a dozen fields.
//!
//! [`Skim`] is a `serde` deserializer over the text of one complete JSON value. Where the
//! target type asks for a struct, it walks the object's members itself and hands the type only
//! the members it names; the others are stepped over by a structural scan (below), never
//! parsed. Where the type asks for a sequence, each element is read the same way. Every other
//! value the type reads (strings, numbers, booleans, maps, enums, `serde_json::Value`) is
//! parsed by `serde_json` from exactly that value's text, so what is read is read exactly as
//! `serde_json` reads it.
//!
//! What the scan of a value that is not read checks — and what it does not:
//! - strings end: a `"` not escaped by `\` closes every string, before the text ends;
//! - brackets balance: each `{` is closed by `}` and each `[` by `]`, in order, at most
//!   128 levels deep (`serde_json`'s own limit);
//! - the members of an object whose fields are read are `"key": value` separated by `,`.
//!
//! Inside a value that is not read, the scan does not check what lies between the brackets
//! and strings: number and literal spellings, separators, escapes and UTF-8 in strings. Such
//! a value is accepted as long as it is balanced; `serde_json` would refuse e.g. `[1 2]` or
//! `1.` there. Types decoded this way must not rely on `deny_unknown_fields` or on
//! `#[serde(alias)]` names: the scan hands the type only the names it lists as its fields.

use std::cell::Cell;
use std::fmt;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor,
};

/// Nesting limit of a skimmed value (`serde_json` refuses deeper values too).
const MAX_DEPTH: u32 = 128;

/// Why a text is not a value of the type, and where (a byte offset in the text skimmed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SkimError {
    pub(crate) message: String,
    pub(crate) at: Option<usize>,
    /// The text stops before the value ends: more of it may make it whole.
    pub(crate) incomplete: bool,
}

impl SkimError {
    fn at(message: impl Into<String>, at: usize) -> Self {
        Self {
            message: message.into(),
            at: Some(at),
            incomplete: false,
        }
    }

    fn incomplete(at: usize) -> Self {
        Self {
            message: "the text ends inside the value".to_owned(),
            at: Some(at),
            incomplete: true,
        }
    }

    /// The position of the innermost value that failed, if the error has none yet.
    fn or_at(mut self, at: usize) -> Self {
        self.at.get_or_insert(at);
        self
    }
}

impl fmt::Display for SkimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some(at) => write!(f, "{} at byte {at}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for SkimError {}

impl de::Error for SkimError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Self {
            message: message.to_string(),
            at: None,
            incomplete: false,
        }
    }
}

/// Where a value ends, found by [`value_end`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The byte after the value.
    At(usize),
    /// The text stops inside the value (or, unless at its end, right after a number or
    /// literal that may go on).
    Incomplete,
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `word` that equals `byte` — exact up to the lowest one, which
/// is all the scans below use.
#[inline(always)]
fn bytes_equal(word: u64, byte: u8) -> u64 {
    let x = word ^ (ONES * u64::from(byte));
    x.wrapping_sub(ONES) & !x & HIGHS
}

/// The first position from `from` of a byte that `hits` flags in an 8-byte word, or of a byte
/// `is_hit` accepts in the last few bytes; `text.len()` when there is none. Eight bytes are
/// looked at per step: more than half of MAAS's pretty-printed text is indentation.
#[inline(always)]
fn find(text: &[u8], from: usize, hits: impl Fn(u64) -> u64, is_hit: impl Fn(u8) -> bool) -> usize {
    let mut i = from;
    while i + 8 <= text.len() {
        let word = u64::from_le_bytes(text[i..i + 8].try_into().expect("eight bytes"));
        let found = hits(word);
        if found != 0 {
            return i + (found.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < text.len() && !is_hit(text[i]) {
        i += 1;
    }
    i
}

/// The next `"` or `\` from `from`.
fn find_in_string(text: &[u8], from: usize) -> usize {
    find(
        text,
        from,
        |w| bytes_equal(w, b'"') | bytes_equal(w, b'\\'),
        |b| b == b'"' || b == b'\\',
    )
}

/// The next `"`, `{`, `}`, `[` or `]` from `from`. `{` and `}` differ from `[` and `]` by one
/// bit (0x20) that no other byte can add to match them, so they are found by clearing it.
fn find_structural(text: &[u8], from: usize) -> usize {
    find(
        text,
        from,
        |w| {
            let folded = w & (ONES * 0xDF);
            bytes_equal(w, b'"') | bytes_equal(folded, b'[') | bytes_equal(folded, b']')
        },
        |b| matches!(b, b'"' | b'{' | b'}' | b'[' | b']'),
    )
}

/// The byte after the string whose opening `"` is at `open`, or `None` when the text stops
/// inside it.
fn string_end(text: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    loop {
        i = find_in_string(text, i);
        match text.get(i)? {
            b'"' => return Some(i + 1),
            // `\` and the byte it escapes (a `\u` escape's hex digits hold no `"`).
            _ => i += 2,
        }
    }
}

fn skip_whitespace(text: &[u8], mut i: usize) -> usize {
    while text.get(i).is_some_and(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t')) {
        i += 1;
    }
    i
}

/// Where the value that starts at `start` ends, by the structural scan of the module doc.
/// `at_end`: no more text will follow, so a number running to the end of the text ends there.
pub(crate) fn value_end(text: &[u8], start: usize, at_end: bool) -> Result<End, SkimError> {
    match text.get(start) {
        None => Ok(End::Incomplete),
        Some(b'"') => Ok(string_end(text, start).map_or(End::Incomplete, End::At)),
        Some(b'{' | b'[') => container_end(text, start),
        Some(b'}' | b']' | b',' | b':') => Err(SkimError::at(
            format!("expected a value, found `{}`", text[start].escape_ascii()),
            start,
        )),
        Some(_) => {
            // A number or a literal: it runs to the next separator.
            let end = text[start..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'))
                .map(|n| start + n);
            Ok(match end {
                Some(end) => End::At(end),
                None if at_end => End::At(text.len()),
                None => End::Incomplete,
            })
        }
    }
}

/// The end of the object or array opening at `open`. Each open level is one bit of `kinds`
/// (set: an object), so the scan needs no allocation.
fn container_end(text: &[u8], open: usize) -> Result<End, SkimError> {
    let mut kinds: u128 = 0;
    let mut depth: u32 = 0;
    let mut i = open;
    loop {
        i = find_structural(text, i);
        let Some(&byte) = text.get(i) else {
            return Ok(End::Incomplete);
        };
        match byte {
            b'"' => match string_end(text, i) {
                Some(end) => i = end,
                None => return Ok(End::Incomplete),
            },
            b'{' | b'[' => {
                if depth == MAX_DEPTH {
                    return Err(SkimError::at(
                        format!("nested more than {MAX_DEPTH} levels deep"),
                        i,
                    ));
                }
                kinds = (kinds << 1) | u128::from(byte == b'{');
                depth += 1;
                i += 1;
            }
            _ => {
                let object = kinds & 1 == 1;
                if object != (byte == b'}') {
                    let (expected, opened) = if object { ('}', '{') } else { (']', '[') };
                    return Err(SkimError::at(
                        format!(
                            "expected `{expected}` to close the `{opened}`, found `{}`",
                            byte as char
                        ),
                        i,
                    ));
                }
                kinds >>= 1;
                depth -= 1;
                i += 1;
                if depth == 0 {
                    return Ok(End::At(i));
                }
            }
        }
    }
}

/// Decodes a `T` from the JSON value at the start of `text` (after whitespace), by skimming:
/// the value and the byte after it. When the text stops inside the value, the error says so
/// ([`SkimError::incomplete`]); unless `at_end`, a number or literal reaching the end of the
/// text is taken as possibly going on. Positions in errors are offsets in `text`.
pub(crate) fn decode_prefix<T: DeserializeOwned>(
    text: &[u8],
    at_end: bool,
) -> Result<(T, usize), SkimError> {
    let reached = Cell::new(None);
    let start = skip_whitespace(text, 0);
    let top = Skim {
        text,
        start,
        end: text.len(),
        top: Some(Top {
            at_end,
            reached: &reached,
        }),
    };
    let value = T::deserialize(top)?;
    let end = reached
        .get()
        .expect("every way of reading the value says where it ended");
    Ok((value, end))
}

/// The value being decoded by [`decode_prefix`], whose end is not known yet.
#[derive(Clone, Copy)]
struct Top<'a> {
    at_end: bool,
    reached: &'a Cell<Option<usize>>,
}

/// One JSON value to decode by skimming (see the module doc): `text[start..end]`, or for the
/// [`Top`] value, from `start` to wherever it ends before `end`.
#[derive(Clone, Copy)]
struct Skim<'de> {
    text: &'de [u8],
    start: usize,
    end: usize,
    top: Option<Top<'de>>,
}

impl<'de> Skim<'de> {
    fn slice(&self) -> &'de [u8] {
        &self.text[self.start..self.end]
    }

    /// The value at `start`, complete, within this one's text.
    fn value_at(&self, start: usize) -> Result<Skim<'de>, SkimError> {
        let at_end = self.top.is_none_or(|top| top.at_end);
        match value_end(&self.text[..self.end], start, at_end)? {
            End::At(end) => Ok(Skim {
                text: self.text,
                start,
                end,
                top: None,
            }),
            End::Incomplete => Err(SkimError::incomplete(self.end)),
        }
    }

    /// This value with its end found, for `serde_json` to parse (the [`Top`] value's end is
    /// then known).
    fn bounded(self) -> Result<Skim<'de>, SkimError> {
        match self.top {
            None => Ok(self),
            Some(top) => {
                let value = self.value_at(self.start)?;
                top.reached.set(Some(value.end));
                Ok(value)
            }
        }
    }

    /// Parses this value with `serde_json`, which then reads exactly its text.
    fn json<R>(
        self,
        parse: impl FnOnce(
            &mut serde_json::Deserializer<serde_json::de::SliceRead<'de>>,
        ) -> Result<R, serde_json::Error>,
    ) -> Result<R, SkimError> {
        let value = self.bounded()?;
        let mut json = serde_json::Deserializer::from_slice(value.slice());
        parse(&mut json)
            .and_then(|parsed| json.end().map(|()| parsed))
            .map_err(|err| value.json_error(&err))
    }

    /// A `serde_json` error on this value's text, its line and column turned into an offset in
    /// the whole text.
    fn json_error(&self, err: &serde_json::Error) -> SkimError {
        let text = err.to_string();
        let position = format!(" at line {} column {}", err.line(), err.column());
        let mut message = text.strip_suffix(&position).unwrap_or(&text).to_owned();
        if err.is_eof() {
            // The scan found where this value ends: what stops early is its spelling (`1.`).
            message = "invalid number or literal".to_owned();
        }
        let slice = self.slice();
        let line_start = match err.line() {
            0 => return SkimError::at(message, self.start),
            1 => 0,
            line => slice
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .nth(line - 2)
                .map_or(0, |(i, _)| i + 1),
        };
        let offset = (line_start + err.column()).saturating_sub(1).min(slice.len());
        SkimError::at(message, self.start + offset)
    }

    fn byte(&self, at: usize) -> Option<u8> {
        self.text[..self.end].get(at).copied()
    }

    fn skip_whitespace(&self, at: usize) -> usize {
        skip_whitespace(&self.text[..self.end], at)
    }

    /// `what` was expected at `at`: an error, or that the text stops there.
    fn expected(&self, what: &str, at: usize) -> SkimError {
        match self.byte(at) {
            Some(byte) => SkimError::at(
                format!("expected {what}, found `{}`", byte.escape_ascii()),
                at,
            ),
            None => SkimError::incomplete(at),
        }
    }

    /// The end of this container (after its closing bracket), once read through.
    fn ended(&self, at: usize) {
        if let Some(top) = self.top {
            top.reached.set(Some(at));
        }
    }
}

/// The members of an object whose `fields` are read; others are stepped over.
struct Members<'de> {
    object: Skim<'de>,
    fields: &'static [&'static str],
    /// Where the next `"key": value` (or the closing `}`) is looked for.
    at: usize,
    first: bool,
    /// The closing `}` is read.
    closed: bool,
    value: Option<Skim<'de>>,
}

impl<'de> Members<'de> {
    /// The next member whose key is a field (its key), or `None` after the closing `}`.
    fn next_read(&mut self) -> Result<Option<KeyText<'de>>, SkimError> {
        let object = self.object;
        loop {
            if self.closed {
                return Ok(None);
            }
            let mut at = object.skip_whitespace(self.at);
            if object.byte(at) == Some(b'}') {
                self.at = at + 1;
                self.closed = true;
                return Ok(None);
            }
            if !self.first {
                if object.byte(at) != Some(b',') {
                    return Err(object.expected("`,` or `}` after a member of the object", at));
                }
                at = object.skip_whitespace(at + 1);
            }
            self.first = false;
            if object.byte(at) != Some(b'"') {
                return Err(object.expected("a member name in quotes", at));
            }
            let key = object.value_at(at)?;
            let colon = object.skip_whitespace(key.end);
            if object.byte(colon) != Some(b':') {
                return Err(object.expected("`:` after a member name", colon));
            }
            let value_start = object.skip_whitespace(colon + 1);
            if object.byte(value_start).is_none() {
                return Err(SkimError::incomplete(value_start));
            }
            let value = object.value_at(value_start)?;
            self.at = value.end;
            let name = KeyText::of(key)?;
            if self.fields.contains(&name.as_str()) {
                self.value = Some(value);
                return Ok(Some(name));
            }
        }
    }
}

/// A member name: borrowed when it has no escape (MAAS's never do).
enum KeyText<'de> {
    Plain(&'de str),
    Escaped(String),
}

impl<'de> KeyText<'de> {
    fn of(key: Skim<'de>) -> Result<Self, SkimError> {
        let inner = &key.slice()[1..key.end - key.start - 1];
        if !inner.contains(&b'\\') {
            std::str::from_utf8(inner)
                .map(KeyText::Plain)
                .map_err(|_| SkimError::at("a member name is not UTF-8", key.start))
        } else {
            key.json(|json| <String as de::Deserialize>::deserialize(json))
                .map(KeyText::Escaped)
        }
    }

    fn as_str(&self) -> &str {
        match self {
            KeyText::Plain(text) => text,
            KeyText::Escaped(text) => text,
        }
    }
}

impl<'de> MapAccess<'de> for Members<'de> {
    type Error = SkimError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, SkimError> {
        match self.next_read()? {
            None => Ok(None),
            Some(KeyText::Plain(name)) => seed
                .deserialize(de::value::BorrowedStrDeserializer::new(name))
                .map(Some),
            Some(KeyText::Escaped(name)) => seed
                .deserialize(de::value::StringDeserializer::new(name))
                .map(Some),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, SkimError> {
        let value = self
            .value
            .take()
            .expect("a value is asked for after its key");
        seed.deserialize(value).map_err(|err| err.or_at(value.start))
    }
}

/// The elements of an array, each read by skimming.
struct Elements<'de> {
    array: Skim<'de>,
    at: usize,
    first: bool,
    /// The closing `]` is read.
    closed: bool,
}

impl<'de> SeqAccess<'de> for Elements<'de> {
    type Error = SkimError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, SkimError> {
        if self.closed {
            return Ok(None);
        }
        let array = self.array;
        let mut at = array.skip_whitespace(self.at);
        if array.byte(at) == Some(b']') {
            self.at = at + 1;
            self.closed = true;
            return Ok(None);
        }
        if !self.first {
            if array.byte(at) != Some(b',') {
                return Err(array.expected("`,` or `]` after an element of the array", at));
            }
            at = array.skip_whitespace(at + 1);
        }
        self.first = false;
        if array.byte(at).is_none() {
            return Err(SkimError::incomplete(at));
        }
        let element = array.value_at(at)?;
        self.at = element.end;
        seed.deserialize(element)
            .map(Some)
            .map_err(|err| err.or_at(element.start))
    }
}

macro_rules! parsed_by_json {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SkimError> {
            self.json(|json| json.$method(visitor))
        }
    )*};
}

impl<'de> Deserializer<'de> for Skim<'de> {
    type Error = SkimError;

    parsed_by_json! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_unit deserialize_map deserialize_identifier
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SkimError> {
        let value = self.bounded()?;
        if value.slice() == b"null" {
            visitor.visit_none()
        } else {
            visitor.visit_some(value)
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, SkimError> {
        self.json(|json| json.deserialize_unit_struct(name, visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, SkimError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SkimError> {
        if self.byte(self.start) != Some(b'[') {
            return self.json(|json| json.deserialize_seq(visitor));
        }
        let mut elements = Elements {
            array: self,
            at: self.start + 1,
            first: true,
            closed: false,
        };
        let value = visitor.visit_seq(&mut elements)?;
        // Elements the type did not ask for are stepped over like unread members.
        while elements.next_element::<de::IgnoredAny>()?.is_some() {}
        self.ended(elements.at);
        Ok(value)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, SkimError> {
        self.json(|json| json.deserialize_tuple(len, visitor))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, SkimError> {
        self.json(|json| json.deserialize_tuple_struct(name, len, visitor))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, SkimError> {
        if self.byte(self.start) != Some(b'{') {
            return self.json(|json| json.deserialize_struct(name, fields, visitor));
        }
        let mut members = Members {
            object: self,
            fields,
            at: self.start + 1,
            first: true,
            closed: false,
            value: None,
        };
        let value = visitor.visit_map(&mut members).map_err(|err| {
            // A missing field is found at the end of the object, as `serde_json` says.
            err.or_at(members.at.saturating_sub(1))
        })?;
        while members.next_read()?.is_some() {
            members.value = None;
        }
        self.ended(members.at);
        Ok(value)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, SkimError> {
        self.json(|json| json.deserialize_enum(name, variants, visitor))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SkimError> {
        // Stepped over by the scan that found where it ends.
        self.bounded()?;
        visitor.visit_unit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The eight-bytes-at-a-time searches find the first byte a byte-by-byte search finds,
    /// wherever it lies in a word and whatever surrounds it (bytes above 0x7f, the bytes
    /// `{`/`}` fold onto, neighbours that borrow in the word arithmetic).
    #[test]
    fn the_word_searches_find_the_first_byte_of_the_set() {
        let fillers = [b' ', b'a', 0x00, 0x01, 0x7f, 0x80, 0xdb, 0xfb, 0xff, b';', b'=', b'!'];
        let targets = [b'"', b'\\', b'{', b'}', b'[', b']'];
        for len in 0..20 {
            for &filler in &fillers {
                for at in 0..=len {
                    for &target in &targets {
                        let mut text = vec![filler; len];
                        if at < len {
                            text[at] = target;
                            // A second hit after the first must not hide it.
                            if at + 1 < len {
                                text[at + 1] = b'"';
                            }
                        }
                        let naive = |set: &[u8]| {
                            (0..len)
                                .find(|&i| set.contains(&text[i]))
                                .unwrap_or(len)
                        };
                        assert_eq!(
                            find_in_string(&text, 0),
                            naive(b"\"\\"),
                            "{text:?}"
                        );
                        assert_eq!(
                            find_structural(&text, 0),
                            naive(b"\"{}[]"),
                            "{text:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_value_ends_after_its_closing_bracket_or_quote() {
        let cases: [(&str, End); 9] = [
            (r#""a\"b" x"#, End::At(6)),
            (r#""a\\" x"#, End::At(5)),
            (r#"{"a": ["}", "]", {"b": "\\"}]} , 1"#, End::At(30)),
            ("[[[]], {}] 1", End::At(10)),
            ("-12.5e3, 1", End::At(7)),
            ("true]", End::At(4)),
            (r#"{"a": "b"#, End::Incomplete),
            ("[1, [2]", End::Incomplete),
            (r#""abc\"#, End::Incomplete),
        ];
        for (text, end) in cases {
            assert_eq!(value_end(text.as_bytes(), 0, false), Ok(end), "{text}");
        }
        // A number running to the end of the text may go on, unless the text is all there.
        assert_eq!(value_end(b"12", 0, false), Ok(End::Incomplete));
        assert_eq!(value_end(b"12", 0, true), Ok(End::At(2)));
    }

    #[test]
    fn a_decoded_value_says_where_it_ended() {
        #[derive(Debug, PartialEq, serde::Deserialize)]
        struct Pair {
            a: Vec<u8>,
            b: Option<String>,
        }
        let text = br#"  {"z": {"deep": [1, {"x": "}"}]}, "b": "two", "a": [1, 2]} , {"#;
        let (pair, end) = decode_prefix::<Pair>(text, false).unwrap();
        assert_eq!(
            pair,
            Pair {
                a: vec![1, 2],
                b: Some("two".to_owned())
            }
        );
        assert_eq!(&text[end..], b" , {");
        let (number, end) = decode_prefix::<u32>(b"17 ]", false).unwrap();
        assert_eq!((number, end), (17, 2));
        let err = decode_prefix::<Pair>(br#"{"a": [1, 2], "b": "tw"#, false).unwrap_err();
        assert!(err.incomplete, "{err}");
        let err = decode_prefix::<Pair>(br#"{"a": [1, 2], "b": 2}"#, true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid type: integer `2`, expected a string at byte 19"
        );
    }
}
