//! Reading a JSON array answer while it arrives (API_REFERENCE §1 "Responses": lists are one
//! JSON array, pretty-printed by piston).
//!
//! A machines list of a large site is tens of megabytes. Gathering it into one buffer before
//! decoding costs a copy of the whole answer into freshly mapped memory, and decoding cannot
//! start before the last byte is in. [`ArrayDecoder`] instead takes the answer piece by piece
//! and decodes each element as soon as it is complete, in the piece that holds it, copying only
//! an element cut by the end of a piece: the memory it needs is about one element, whatever the
//! size of the list, and decoding overlaps the transfer. The result is what decoding the whole
//! text as a `Vec<T>` gives, except that an error names the element and its byte offset.
//!
//! A type that reads only some members of each object ([`Decodable::READS`]) has the rest
//! stepped over by [`super::skim`]; an element the scan cannot follow, or whose projection
//! does not decode, is decoded whole by serde, so errors are serde's either way.

use serde::de::DeserializeOwned;

use super::skim::{self, Projection};

/// A type decoded from MAAS's answers.
pub(crate) trait Decodable: DeserializeOwned {
    /// The members of an object answer that decoding reads (`None`: every one). The others
    /// are stepped over by a scan several times cheaper than serde's.
    const READS: Option<&'static Projection> = None;
}

/// Decodes one JSON object answer (`text`, whole) as `T`, reading only `T::READS`.
pub(crate) fn decode_object<T: Decodable>(text: &[u8]) -> Result<T, serde_json::Error> {
    let start = skim::whitespace_end(text, 0);
    if let Ok(Some((value, end))) = skimmed(&text[start..], &mut Vec::new())
        && skim::whitespace_end(text, start + end) == text.len()
    {
        return Ok(value);
    }
    serde_json::from_slice(text)
}

/// The object at the start of `text` as `T`, only `T::READS` decoded (copied into `projected`
/// first), and where it ends; `Ok(None)` when `text` ends before it does. `Err` when `T` reads
/// everything, the scan cannot follow the object, or its projection does not decode: serde,
/// decoding it whole, decides (and says what is wrong).
fn skimmed<T: Decodable>(
    text: &[u8],
    projected: &mut Vec<u8>,
) -> Result<Option<(T, usize)>, skim::Unfollowed> {
    let reads = T::READS.ok_or(skim::Unfollowed)?;
    projected.clear();
    let Some(end) = skim::project(text, 0, reads, projected)? else {
        return Ok(None);
    };
    let value = serde_json::from_slice(projected).map_err(|_| skim::Unfollowed)?;
    Ok(Some((value, end)))
}

/// Unconsumed bytes gathered before decoding is tried again while elements are still smaller
/// (at most this much is tried in vain on one element, before the doubling rule takes over).
const BATCH: usize = 256 * 1024;

/// Bytes kept from the start of the answer, for error excerpts (200 characters).
const HEAD: usize = 800;

/// Where the decoder is in the array's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before `[`.
    Open,
    /// After `[`: an element or `]`.
    First,
    /// After `,`: an element.
    Element,
    /// After an element: `,` or `]`.
    Next,
    /// After `]`: only whitespace may follow.
    Closed,
}

/// Why an answer is not a JSON array of `T`.
#[derive(Debug)]
pub(crate) struct ArrayError {
    pub(crate) error: serde_json::Error,
    /// The first bytes of the answer.
    pub(crate) head: Vec<u8>,
}

/// Decodes a JSON array of `T` from the pieces of its text, in order (see the module doc).
///
/// Elements are decoded where they lie in the piece that holds them whole; only an element cut
/// by the end of a piece is copied, into `pending`, and completed there from the start of the
/// next piece (the HTTP client hands over pieces of up to ~400 KB, a machine is ~30 KB, so
/// most of a list is never copied).
pub(crate) struct ArrayDecoder<T> {
    /// The unconsumed end of earlier pieces (from `start`), then what of the current piece it
    /// took to complete it.
    pending: Vec<u8>,
    /// Bytes of `pending` already decoded.
    start: usize,
    /// Offset in the answer of `pending[0]` (of the next piece's first byte when nothing is
    /// pending).
    offset: usize,
    /// Unconsumed bytes to gather before trying again: an element as large as the largest so
    /// far, and twice what was there at the last try while one element stays incomplete, so a
    /// huge element costs a bounded number of attempts.
    wait_for: usize,
    batch: usize,
    /// Bytes of the largest element decoded so far.
    largest: usize,
    state: State,
    items: Vec<T>,
    head: Vec<u8>,
    /// The members of the element being decoded that `T` reads.
    projected: Vec<u8>,
}

impl<T: Decodable> Default for ArrayDecoder<T> {
    fn default() -> Self {
        Self::with_batch(BATCH)
    }
}

impl<T: Decodable> ArrayDecoder<T> {
    /// Tries an element cut short again once `batch` bytes of it are in, or as many as the
    /// largest element so far if that is less.
    fn with_batch(batch: usize) -> Self {
        Self {
            pending: Vec::new(),
            start: 0,
            offset: 0,
            wait_for: 0,
            batch,
            largest: 0,
            state: State::Open,
            items: Vec::new(),
            head: Vec::new(),
            projected: Vec::new(),
        }
    }

    /// The next piece of the answer.
    pub(crate) fn feed(&mut self, piece: &[u8]) -> Result<(), ArrayError> {
        if self.head.len() < HEAD {
            let take = piece.len().min(HEAD - self.head.len());
            self.head.extend_from_slice(&piece[..take]);
            if self.state == State::Open && self.head.len() < HEAD {
                // Not known to be an array yet: what it is instead (an HTML error page) is
                // shown from its start, so that much is gathered before anything is decided.
                self.pending.extend_from_slice(piece);
                return Ok(());
            }
        }
        let rest = if self.start < self.pending.len() {
            match self.complete_pending(piece) {
                Ok(Some(resume)) => &piece[resume..],
                Ok(None) => return Ok(()),
                Err(error) => return Err(self.failed(error)),
            }
        } else {
            piece
        };
        // Nothing pending: decode in place, keep the unfinished end.
        let used = self
            .advance(rest, self.offset, false)
            .map_err(|error| self.failed(error))?;
        self.pending.clear();
        self.start = 0;
        self.offset += used;
        self.pending.extend_from_slice(&rest[used..]);
        Ok(())
    }

    /// Appends `piece` to `pending` as far as it takes to decode past the end of the earlier
    /// pieces; then `Some(i)`: decoding goes on at `piece[i]`, nothing pending. `None`: all of
    /// `piece` is pending, waiting for more.
    fn complete_pending(&mut self, piece: &[u8]) -> Result<Option<usize>, serde_json::Error> {
        if self.start > 0 && self.start >= self.pending.len() / 2 {
            // Drop what is decoded (at most half the buffer is moved).
            self.pending.drain(..self.start);
            self.offset += self.start;
            self.start = 0;
        }
        let mut taken = 0;
        while taken < piece.len() {
            let unconsumed = self.pending.len() - self.start;
            let take = self
                .wait_for
                .saturating_sub(unconsumed)
                .clamp(1, piece.len() - taken);
            self.pending.extend_from_slice(&piece[taken..taken + take]);
            taken += take;
            if self.pending.len() - self.start < self.wait_for {
                continue;
            }
            let pending = std::mem::take(&mut self.pending);
            let used = self.advance(&pending[self.start..], self.offset + self.start, false);
            self.pending = pending;
            self.start += used?;
            // Where `piece[0]` is in `pending`: once decoding has passed it, the rest is read
            // from the piece itself.
            let piece_at = self.pending.len() - taken;
            if self.start >= piece_at {
                let resume = self.start - piece_at;
                self.offset += self.start;
                self.pending.clear();
                self.start = 0;
                return Ok(Some(resume));
            }
        }
        Ok(None)
    }

    /// The end of the answer: every element, or why the text is not a complete array.
    pub(crate) fn finish(mut self) -> Result<Vec<T>, ArrayError> {
        let pending = std::mem::take(&mut self.pending);
        if let Err(error) = self.advance(&pending[self.start..], self.offset + self.start, true) {
            return Err(self.failed(error));
        }
        if self.state != State::Closed {
            let error = self.error(match self.state {
                State::Open => "an empty answer where a JSON array was expected".to_owned(),
                _ => format!(
                    "the answer ends early (truncated after {} complete element(s) of the list)",
                    self.items.len()
                ),
            });
            return Err(self.failed(error));
        }
        Ok(self.items)
    }

    fn failed(&mut self, error: serde_json::Error) -> ArrayError {
        ArrayError {
            error,
            head: std::mem::take(&mut self.head),
        }
    }

    fn error(&self, message: String) -> serde_json::Error {
        serde::de::Error::custom(message)
    }

    /// Decodes what can be decoded of `text`, which starts at byte `base` of the answer;
    /// returns how many bytes of it are consumed. `at_end` when no more pieces will come.
    fn advance(
        &mut self,
        text: &[u8],
        base: usize,
        at_end: bool,
    ) -> Result<usize, serde_json::Error> {
        let mut at = 0;
        loop {
            while text.get(at).is_some_and(u8::is_ascii_whitespace) {
                at += 1;
            }
            let Some(&byte) = text.get(at) else {
                break;
            };
            match (self.state, byte) {
                (State::Open, b'[') => {
                    at += 1;
                    self.state = State::First;
                }
                (State::Open, _) => {
                    return Err(self.error(format!(
                        "expected a JSON array, found `{}` at byte {}",
                        byte.escape_ascii(),
                        base + at
                    )));
                }
                (State::First, b']') | (State::Next, b']') => {
                    at += 1;
                    self.state = State::Closed;
                }
                (State::First | State::Element, _) => {
                    // A list's elements are alike in size: fewer bytes than the largest so far
                    // are most likely an element cut short, and decoding it would be wasted
                    // (a batch at most: one huge element does not hold back the rest).
                    if !at_end && text.len() - at < self.largest.min(self.batch) {
                        break;
                    }
                    let element = &text[at..];
                    match skimmed(element, &mut self.projected) {
                        Ok(Some((item, end))) => {
                            self.largest = self.largest.max(end);
                            at += end;
                            self.items.push(item);
                            self.state = State::Next;
                            continue;
                        }
                        Ok(None) if !at_end => break,
                        // serde, decoding the element whole, says what is wrong.
                        Ok(None) | Err(_) => {}
                    }
                    let mut stream = serde_json::Deserializer::from_slice(element).into_iter::<T>();
                    match stream.next() {
                        Some(Ok(item)) if at_end || stream.byte_offset() < element.len() => {
                            self.largest = self.largest.max(stream.byte_offset());
                            at += stream.byte_offset();
                            self.items.push(item);
                            self.state = State::Next;
                        }
                        // A value ending where the text ends may go on in the next piece (a
                        // number); an error where the text ends may be that the element does
                        // (serde_json reports e.g. `1.` as an invalid number, not as EOF, when
                        // the value is skipped). Wait for more of it.
                        Some(Ok(_)) => break,
                        Some(Err(err))
                            if !at_end && (err.is_eof() || at_last_byte(element, &err)) =>
                        {
                            break;
                        }
                        Some(Err(err)) if err.is_eof() => {
                            return Err(self.error(format!(
                                "the answer ends early (truncated in element {} of the list, from byte {})",
                                self.items.len(),
                                base + at
                            )));
                        }
                        Some(Err(err)) => {
                            return Err(self.error(format!(
                                "element {} of the array (from byte {}): {err}",
                                self.items.len(),
                                base + at
                            )));
                        }
                        None => break,
                    }
                }
                (State::Next, b',') => {
                    at += 1;
                    self.state = State::Element;
                }
                (State::Next, _) => {
                    return Err(self.error(format!(
                        "expected `,` or `]` after element {} of the array, found `{}` at byte {}",
                        self.items.len() - 1,
                        byte.escape_ascii(),
                        base + at
                    )));
                }
                (State::Closed, _) => {
                    return Err(self.error(format!(
                        "unexpected `{}` at byte {} after the end of the array",
                        byte.escape_ascii(),
                        base + at
                    )));
                }
            }
        }
        self.wait_for = self.largest.min(self.batch).max(2 * (text.len() - at));
        Ok(at)
    }
}

/// Whether `err` was detected at the last byte of `text` (or after it): the text may simply
/// stop there.
fn at_last_byte(text: &[u8], err: &serde_json::Error) -> bool {
    let newlines = text.iter().filter(|&&b| b == b'\n').count();
    let last_line = text.len() - text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    err.line() == newlines + 1 && err.column() >= last_line
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Deserialize)]
    struct Item {
        id: u64,
        #[serde(default)]
        name: String,
        #[serde(default)]
        ratio: f64,
    }

    impl Decodable for Item {}
    impl Decodable for f64 {}

    /// [`Item`], its other members stepped over by the scan.
    #[derive(Debug, PartialEq, Deserialize)]
    struct Skimmed {
        id: u64,
        #[serde(default)]
        name: String,
        #[serde(default)]
        ratio: f64,
    }

    static SKIMMED_READS: Projection = Projection {
        members: &[
            skim::Member::whole("id"),
            skim::Member::whole("name"),
            skim::Member::whole("ratio"),
        ],
    };

    impl Decodable for Skimmed {
        const READS: Option<&'static Projection> = Some(&SKIMMED_READS);
    }

    impl From<Skimmed> for Item {
        fn from(s: Skimmed) -> Self {
            Item {
                id: s.id,
                name: s.name,
                ratio: s.ratio,
            }
        }
    }

    /// Decodes `text` fed in pieces of `size` bytes, trying to decode after every piece
    /// (`batch` 1) or in real batches.
    fn decode_with<T: Decodable>(text: &str, size: usize, batch: usize) -> Result<Vec<T>, String> {
        let mut decoder = ArrayDecoder::<T>::with_batch(batch);
        for piece in text.as_bytes().chunks(size.max(1)) {
            decoder.feed(piece).map_err(|e| e.error.to_string())?;
        }
        decoder.finish().map_err(|e| e.error.to_string())
    }

    /// Decoded as [`Item`]s, every way: eagerly and in batches, and skimmed; all must agree.
    fn decode(text: &str, size: usize) -> Result<Vec<Item>, String> {
        let eager = decode_with(text, size, 1);
        assert_eq!(
            eager,
            decode_with(text, size, BATCH),
            "{text:?} in pieces of {size}"
        );
        for batch in [1, BATCH] {
            let skimmed = decode_with::<Skimmed>(text, size, batch)
                .map(|items| items.into_iter().map(Item::from).collect::<Vec<_>>());
            assert_eq!(eager, skimmed, "{text:?} skimmed in pieces of {size}");
        }
        eager
    }

    /// Elements with every kind of JSON value, in decoded and skipped fields: a cut may fall
    /// inside any of them.
    fn document(n: u64) -> (serde_json::Value, Vec<Item>) {
        let items: Vec<Item> = (0..n)
            .map(|id| Item {
                id,
                name: format!("node \"{id}\" ]}},[ \u{e9}\u{1F600}\\"),
                ratio: -1.5e-3 * id as f64,
            })
            .collect();
        let values = items
            .iter()
            .map(|i| {
                serde_json::json!({
                    "skip": {"n": -12.5e+3, "m": [1, 2.25, -0.0, 1E10], "t": true, "f": false,
                             "z": null, "s": "esc \" \\ \u{2028} \u{7f}", "o": {}, "a": []},
                    "id": i.id, "name": i.name, "ratio": i.ratio, "after": 123456789
                })
            })
            .collect();
        (serde_json::Value::Array(values), items)
    }

    #[test]
    fn any_cut_of_the_answer_decodes_like_the_whole() {
        for n in [0, 1, 2, 5] {
            let (value, items) = document(n);
            let indented = serde_json::to_string_pretty(&value).unwrap();
            // Unicode escapes as MAAS's json.dumps writes them (ensure_ascii).
            let escaped = indented
                .replace('\u{e9}', "\\u00e9")
                .replace('\u{1F600}', "\\ud83d\\ude00");
            for text in [indented, value.to_string(), escaped] {
                let whole: Vec<Item> = serde_json::from_str(&text).unwrap();
                assert_eq!(whole, items);
                for size in [1, 2, 3, 5, 7, 16, 64, text.len()] {
                    assert_eq!(
                        decode(&text, size).unwrap(),
                        whole,
                        "n {n}, pieces of {size}"
                    );
                }
            }
        }
        assert_eq!(decode(" [ ] \n", 1).unwrap(), vec![]);
        // Elements that are numbers do not tell where they end: a cut must not split one.
        let numbers = "[1, 23, -4.5e6, 789]";
        for size in 1..numbers.len() {
            assert_eq!(
                decode_with::<f64>(numbers, size, 1).unwrap(),
                vec![1.0, 23.0, -4.5e6, 789.0]
            );
        }
    }

    #[test]
    fn a_simulated_machines_list_decodes_like_the_whole_wherever_it_is_cut() {
        use crate::provider::maas::MachineSummary;
        use crate::sim::{FleetOptions, InitialState, SimConfig, World};
        for initial in [InitialState::Deployed, InitialState::Ready] {
            let config = SimConfig::generated(
                3,
                &FleetOptions {
                    machines: 12,
                    initial,
                    no_boss_every: 4,
                    unknown: 0,
                },
            );
            let mut world = World::new(config, chrono::Utc::now()).unwrap();
            let ids: Vec<u64> = world.machines.keys().copied().collect();
            let text = String::from_utf8(world.machines_list_body(&ids).concat()).unwrap();
            let whole: Vec<MachineSummary> = serde_json::from_str(&text).unwrap();
            assert_eq!(whole.len(), 12);
            for size in [1, 3, 1000, 4096] {
                assert_eq!(
                    decode_with::<MachineSummary>(&text, size, 1).unwrap(),
                    whole
                );
            }
        }
    }

    #[test]
    fn a_large_answer_is_decoded_in_batches_with_a_bounded_buffer() {
        let (value, items) = document(20_000);
        let text = serde_json::to_string_pretty(&value).unwrap();
        assert!(text.len() > 16 * BATCH);
        let mut decoder = ArrayDecoder::<Item>::default();
        let mut largest = 0;
        for piece in text.as_bytes().chunks(16 * 1024) {
            decoder.feed(piece).unwrap();
            largest = largest.max(decoder.pending.len());
        }
        assert!(decoder.items.len() > 15_000, "decoded while arriving");
        assert!(largest <= 3 * BATCH, "buffer grew to {largest}");
        assert_eq!(decoder.finish().unwrap(), items);
    }

    #[test]
    fn elements_are_decoded_in_the_pieces_that_hold_them_whole() {
        let (value, items) = document(2_000);
        let text = serde_json::to_string_pretty(&value).unwrap();
        let whole: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        let element = whole
            .iter()
            .map(|v| serde_json::to_string_pretty(v).unwrap().len() * 2)
            .max()
            .unwrap();
        for piece_size in [4 * 1024, 64 * 1024] {
            let mut decoder = ArrayDecoder::<Item>::default();
            for piece in text.as_bytes().chunks(piece_size) {
                decoder.feed(piece).unwrap();
                // Only the element the piece cut is kept: never a batch of them.
                let kept = decoder.pending.len() - decoder.start;
                assert!(kept < element, "{kept} bytes kept after a piece");
            }
            assert_eq!(decoder.finish().unwrap(), items);
        }
    }

    #[test]
    fn an_element_larger_than_a_batch_still_decodes() {
        let big = "x".repeat(3 * BATCH);
        let text = format!(r#"[{{"id": 1, "name": "{big}"}}, {{"id": 2}}]"#);
        let decoded = decode(&text, 1000).unwrap();
        assert_eq!(decoded.len(), 2);
        assert_eq!(decoded[0].name.len(), 3 * BATCH);
    }

    #[test]
    fn what_is_not_a_complete_array_is_an_error_naming_where() {
        let cases = [
            ("", "an empty answer where a JSON array was expected"),
            ("null", "expected a JSON array, found `n` at byte 0"),
            (
                "<html>not json</html>",
                "expected a JSON array, found `<` at byte 0",
            ),
            (
                r#"[{"id": 1}"#,
                "the answer ends early (truncated after 1 complete element(s) of the list)",
            ),
            (
                r#"[{"id": 1}, {"id": 2"#,
                "the answer ends early (truncated in element 1 of the list, from byte 12)",
            ),
            (
                r#"[{"id": 1} {"id": 2}]"#,
                "expected `,` or `]` after element 0 of the array, found `{` at byte 11",
            ),
            (
                r#"[{"id": 1}] ["#,
                "unexpected `[` at byte 12 after the end of the array",
            ),
            (
                r#"[{"id": 1}, {"name": "x"}]"#,
                "element 1 of the array (from byte 12): missing field `id` at line 1 column 13",
            ),
            (
                r#"[{"id": 1},]"#,
                "element 1 of the array (from byte 11): expected value at line 1 column 1",
            ),
            (
                r#"[{"id": 1, "x": 1.}]"#,
                "element 0 of the array (from byte 1): invalid number at line 1 column 18",
            ),
            (
                r#"[{"id": 1, "x": 1."#,
                "element 0 of the array (from byte 1): invalid number at line 1 column 17",
            ),
            (
                r#"[{"id": -}]"#,
                "element 0 of the array (from byte 1): invalid number at line 1 column 9",
            ),
        ];
        for (text, expected) in cases {
            for size in [1, 4, 1 << 20] {
                assert_eq!(
                    decode(text, size).unwrap_err(),
                    expected,
                    "{text:?} in pieces of {size}"
                );
            }
        }
    }

    #[test]
    fn an_error_keeps_the_start_of_the_answer() {
        let mut decoder = ArrayDecoder::<Item>::default();
        decoder.feed(b"<html>").unwrap();
        decoder.feed(b"not json</html>").unwrap();
        let err = decoder.finish().unwrap_err();
        assert_eq!(err.head, b"<html>not json</html>");
    }
}
