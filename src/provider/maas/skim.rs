//! Stepping over the JSON of a MAAS answer without decoding it (API_REFERENCE §1 "Responses",
//! §3.1: a machine is the whole `DISPLAYED_MACHINE_FIELDS` set, list and detail alike).
//!
//! A machine in an answer is about 30 KB of JSON, and an observation reads a few hundred bytes
//! of it (status, hostname, MACs). serde steps over the rest a byte at a time. Here the end of
//! a value is found 64 bytes at a time: which bytes are quotes, backslashes and brackets comes
//! as bit masks, strings become a mask by a running XOR of the quote bits, and the nesting
//! depth is counted on the brackets outside strings. [`project`] copies the members a type
//! reads into a small object, which serde decodes.
//!
//! The scan checks what it needs to find an end (strings, escapes, nesting, the shape of the
//! object being projected). It does not check what it steps over inside a skipped value:
//! everything kept is decoded, and so checked, by serde, and an element the scan cannot follow
//! is decoded whole by serde, so its error is serde's.

/// The members of a JSON object that a type reads.
pub(crate) struct Projection {
    pub(crate) members: &'static [Member],
}

/// A member read, by its name in the answer.
pub(crate) struct Member {
    pub(crate) name: &'static str,
    /// The member is an array of objects, and of each only these members are read.
    pub(crate) each: Option<&'static Projection>,
}

impl Member {
    /// A member read as it is.
    pub(crate) const fn whole(name: &'static str) -> Self {
        Self { name, each: None }
    }

    /// An array of objects, read through `projection`.
    pub(crate) const fn each(name: &'static str, projection: &'static Projection) -> Self {
        Self {
            name,
            each: Some(projection),
        }
    }
}

impl Projection {
    fn member(&self, key: &[u8]) -> Option<&Member> {
        self.members.iter().find(|m| m.name.as_bytes() == key)
    }
}

/// The text is not JSON this scan can follow; serde, decoding it whole, says why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unfollowed;

/// Where a scan got: `Some(end)`, the index after the value, or `None` when the text ends
/// before the value does.
pub(crate) type Scan = Result<Option<usize>, Unfollowed>;

/// Copies into `out` the object starting at `text[start]` with only `projection`'s members
/// (and, of a member read `each`, only those of its objects); returns where the object ends.
/// Members keep their order and their text; a member read twice is copied twice, as serde
/// would see it.
pub(crate) fn project(
    text: &[u8],
    start: usize,
    projection: &Projection,
    out: &mut Vec<u8>,
) -> Scan {
    match text.get(start) {
        Some(b'{') => out.push(b'{'),
        Some(_) => return Err(Unfollowed),
        None => return Ok(None),
    }
    let mut copied = false;
    let mut at = whitespace_end(text, start + 1);
    if text.get(at) == Some(&b'}') {
        out.push(b'}');
        return Ok(Some(at + 1));
    }
    loop {
        match text.get(at) {
            Some(b'"') => {}
            Some(_) => return Err(Unfollowed),
            None => return Ok(None),
        }
        let Some(key_end) = string_end(text, at) else {
            return Ok(None);
        };
        let key = &text[at + 1..key_end - 1];
        let member = if key.contains(&b'\\') {
            // An escaped name (MAAS writes none): compared as serde would decode it.
            let name: String =
                serde_json::from_slice(&text[at..key_end]).map_err(|_| Unfollowed)?;
            projection.member(name.as_bytes())
        } else {
            projection.member(key)
        };
        let key_start = at;
        at = whitespace_end(text, key_end);
        match text.get(at) {
            Some(b':') => {}
            Some(_) => return Err(Unfollowed),
            None => return Ok(None),
        }
        let value = whitespace_end(text, at + 1);
        let end = match member {
            None => value_end(text, value)?,
            Some(member) => {
                if copied {
                    out.push(b',');
                }
                copied = true;
                out.extend_from_slice(&text[key_start..key_end]);
                out.push(b':');
                match member.each {
                    Some(each) if text.get(value) == Some(&b'[') => {
                        project_each(text, value, each, out)?
                    }
                    _ => copy_value(text, value, out)?,
                }
            }
        };
        let Some(end) = end else {
            return Ok(None);
        };
        at = whitespace_end(text, end);
        match text.get(at) {
            Some(b',') => at = whitespace_end(text, at + 1),
            Some(b'}') => {
                out.push(b'}');
                return Ok(Some(at + 1));
            }
            Some(_) => return Err(Unfollowed),
            None => return Ok(None),
        }
    }
}

/// The array at `text[start]`, each object in it projected (anything else copied as it is).
fn project_each(text: &[u8], start: usize, each: &Projection, out: &mut Vec<u8>) -> Scan {
    out.push(b'[');
    let mut at = whitespace_end(text, start + 1);
    if text.get(at) == Some(&b']') {
        out.push(b']');
        return Ok(Some(at + 1));
    }
    loop {
        let end = if text.get(at) == Some(&b'{') {
            project(text, at, each, out)?
        } else {
            copy_value(text, at, out)?
        };
        let Some(end) = end else {
            return Ok(None);
        };
        at = whitespace_end(text, end);
        match text.get(at) {
            Some(b',') => {
                out.push(b',');
                at = whitespace_end(text, at + 1);
            }
            Some(b']') => {
                out.push(b']');
                return Ok(Some(at + 1));
            }
            Some(_) => return Err(Unfollowed),
            None => return Ok(None),
        }
    }
}

/// The value starting at `text[start]`, copied into `out` as it is.
fn copy_value(text: &[u8], start: usize, out: &mut Vec<u8>) -> Scan {
    let end = value_end(text, start)?;
    if let Some(end) = end {
        out.extend_from_slice(&text[start..end]);
    }
    Ok(end)
}

/// Where the value starting at `text[start]` ends. A number or literal that reaches the end
/// of `text` is `None`: more of it may follow.
fn value_end(text: &[u8], start: usize) -> Scan {
    match text.get(start) {
        None => Ok(None),
        Some(b'"') => Ok(string_end(text, start)),
        Some(b'{' | b'[') => Ok(container_end(text, start)),
        Some(_) => scalar_end(text, start),
    }
}

/// The first byte at or after `at` that is not JSON whitespace.
pub(crate) fn whitespace_end(text: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = text.get(at) {
        at += 1;
    }
    at
}

/// The end of the string whose opening quote is `text[start]`.
fn string_end(text: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    loop {
        at += memchr::memchr2(b'"', b'\\', &text[at.min(text.len())..])?;
        if text[at] == b'"' {
            return Some(at + 1);
        }
        at += 2;
    }
}

/// A number, `true`, `false` or `null`.
fn scalar_end(text: &[u8], start: usize) -> Scan {
    let length = text[start..]
        .iter()
        .position(|b| !matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'+' | b'.' | b'E'))
        .unwrap_or(text.len() - start);
    if start + length == text.len() {
        return Ok(None);
    }
    let scalar = &text[start..start + length];
    if matches!(scalar, b"true" | b"false" | b"null") || is_number(scalar) {
        Ok(Some(start + length))
    } else {
        Err(Unfollowed)
    }
}

/// JSON's number grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
fn is_number(text: &[u8]) -> bool {
    let digits = |at: usize| text[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    let mut at = usize::from(text.first() == Some(&b'-'));
    match text.get(at) {
        Some(b'0') => at += 1,
        Some(b'1'..=b'9') => at += digits(at),
        _ => return false,
    }
    if text.get(at) == Some(&b'.') {
        let fraction = digits(at + 1);
        if fraction == 0 {
            return false;
        }
        at += 1 + fraction;
    }
    if let Some(b'e' | b'E') = text.get(at) {
        at += 1;
        if let Some(b'+' | b'-') = text.get(at) {
            at += 1;
        }
        let exponent = digits(at);
        if exponent == 0 {
            return false;
        }
        at += exponent;
    }
    at == text.len()
}

/// The end of the object or array opening at `text[start]`, 64 bytes at a time: with AVX2,
/// POPCNT and carry-less multiplication where the CPU has them (x86-64 server CPUs of the
/// last decade do), else with what every x86-64 CPU has.
fn container_end(text: &[u8], start: usize) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if wide::available() {
        // SAFETY: the CPU has the features `wide::container_end` is compiled for.
        return unsafe { wide::container_end(text, start) };
    }
    container_end_with(text, start, Masks::of, prefix_xor)
}

/// [`container_end`] with `masks_of` and `prefix_xor` as given: inlined into its callers, so
/// that each compiles it for its own CPU features.
#[inline(always)]
fn container_end_with(
    text: &[u8],
    start: usize,
    masks_of: impl Fn(&[u8; 64]) -> Masks,
    prefix_xor: impl Fn(u64) -> u64,
) -> Option<usize> {
    const SPACES: [u8; 64] = [b' '; 64];
    let mut depth: u32 = 0;
    // All ones when the block starts inside a string.
    let mut in_string_carry: u64 = 0;
    // 1 when the block's first byte is escaped by a backslash ending the previous block.
    let mut escape_carry: u64 = 0;
    let mut at = start;
    // Only the last block can be short.
    let mut padded = SPACES;
    while at < text.len() {
        let block: &[u8; 64] = match text.get(at..at + 64) {
            Some(whole) => whole.try_into().unwrap_or(&SPACES),
            None => {
                padded[..text.len() - at].copy_from_slice(&text[at..]);
                &padded
            }
        };
        let masks = masks_of(block);
        let escaped = escaped(masks.backslash, &mut escape_carry);
        let in_string = prefix_xor(masks.quote & !escaped) ^ in_string_carry;
        in_string_carry = 0u64.wrapping_sub(in_string >> 63);
        let open = masks.open & !in_string;
        let close = masks.close & !in_string;
        let closes = close.count_ones();
        if depth > closes {
            // The nesting cannot come back to the start within this block.
            depth = depth + open.count_ones() - closes;
        } else {
            let mut brackets = open | close;
            while brackets != 0 {
                let bit = brackets.trailing_zeros();
                if open >> bit & 1 == 1 {
                    depth += 1;
                } else {
                    depth -= 1;
                    if depth == 0 {
                        return Some(at + bit as usize + 1);
                    }
                }
                brackets &= brackets - 1;
            }
        }
        at += 64;
    }
    None
}

/// The bytes escaped by a backslash: each backslash not itself escaped escapes the next byte.
/// `carry` brings in (and takes out) an escape crossing the block's boundary. Backslashes are
/// rare in MAAS answers, so they are taken one by one.
fn escaped(backslash: u64, carry: &mut u64) -> u64 {
    let mut escaped = *carry;
    *carry = 0;
    let mut escaping = backslash & !escaped;
    while escaping != 0 {
        let bit = escaping.trailing_zeros();
        if bit == 63 {
            *carry = 1;
        } else {
            escaped |= 1 << (bit + 1);
            escaping &= !(1 << (bit + 1));
        }
        escaping &= escaping - 1;
    }
    escaped
}

/// Bit `i` set when an odd number of bits `0..=i` of `bits` are: between an opening quote
/// (included) and its closing one (excluded).
fn prefix_xor(mut bits: u64) -> u64 {
    for shift in [1, 2, 4, 8, 16, 32] {
        bits ^= bits << shift;
    }
    bits
}

/// Which of 64 bytes are quotes, backslashes, opening (`{[`) and closing (`}]`) brackets.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Masks {
    quote: u64,
    backslash: u64,
    open: u64,
    close: u64,
}

impl Masks {
    #[cfg(target_arch = "x86_64")]
    fn of(block: &[u8; 64]) -> Self {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
            _mm_set1_epi8,
        };
        let mut masks = Self::default();
        for lane in 0..4 {
            // SAFETY: SSE2 is in every x86-64 CPU (the target's baseline), and the load reads
            // bytes 16 * lane .. 16 * lane + 16 of the 64-byte block.
            let [quote, backslash, open, close] = unsafe {
                let bytes = _mm_loadu_si128(block.as_ptr().add(16 * lane).cast::<__m128i>());
                // `[` and `{` differ by 0x20, as do `]` and `}`; no other byte ORed with 0x20
                // gives `{` or `}`.
                let folded = _mm_or_si128(bytes, _mm_set1_epi8(0x20));
                let equal = |v: __m128i, byte: u8| {
                    _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(byte as i8)))
                };
                [
                    equal(bytes, b'"'),
                    equal(bytes, b'\\'),
                    equal(folded, b'{'),
                    equal(folded, b'}'),
                ]
            };
            let shift = 16 * lane;
            masks.quote |= u64::from(quote as u16) << shift;
            masks.backslash |= u64::from(backslash as u16) << shift;
            masks.open |= u64::from(open as u16) << shift;
            masks.close |= u64::from(close as u16) << shift;
        }
        masks
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn of(block: &[u8; 64]) -> Self {
        Self::portable(block)
    }

    /// A byte at a time.
    #[cfg(any(test, not(target_arch = "x86_64")))]
    fn portable(block: &[u8; 64]) -> Self {
        let mut masks = Self::default();
        for (i, &byte) in block.iter().enumerate() {
            let bit = 1u64 << i;
            match byte {
                b'"' => masks.quote |= bit,
                b'\\' => masks.backslash |= bit,
                b'{' | b'[' => masks.open |= bit,
                b'}' | b']' => masks.close |= bit,
                _ => {}
            }
        }
        masks
    }
}

/// The scan compiled for AVX2, POPCNT and PCLMULQDQ, taken when the CPU has them.
#[cfg(target_arch = "x86_64")]
mod wide {
    use std::arch::x86_64::{
        __m256i, _mm_clmulepi64_si128, _mm_cvtsi128_si64, _mm_set_epi64x, _mm_set1_epi8,
        _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_or_si256,
        _mm256_set1_epi8,
    };
    use std::sync::LazyLock;

    use super::Masks;

    /// Whether this CPU has the features (asked once).
    pub(super) fn available() -> bool {
        static AVAILABLE: LazyLock<bool> = LazyLock::new(|| {
            is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("popcnt")
                && is_x86_feature_detected!("pclmulqdq")
        });
        *AVAILABLE
    }

    #[target_feature(enable = "avx2,popcnt,pclmulqdq")]
    pub(super) fn container_end(text: &[u8], start: usize) -> Option<usize> {
        super::container_end_with(
            text,
            start,
            |block| masks_of(block),
            |bits| prefix_xor(bits),
        )
    }

    /// [`Masks::of`], 32 bytes at a time.
    #[target_feature(enable = "avx2")]
    pub(super) fn masks_of(block: &[u8; 64]) -> Masks {
        let mut masks = Masks::default();
        for half in 0..2 {
            // SAFETY: the load reads bytes 32 * half .. 32 * half + 32 of the 64-byte block.
            let bytes =
                unsafe { _mm256_loadu_si256(block.as_ptr().add(32 * half).cast::<__m256i>()) };
            // As in `Masks::of`: `[{` and `]}` differ by 0x20.
            let folded = _mm256_or_si256(bytes, _mm256_set1_epi8(0x20));
            let equal = |v: __m256i, byte: u8| {
                u64::from(
                    _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(byte as i8))) as u32,
                )
            };
            let shift = 32 * half;
            masks.quote |= equal(bytes, b'"') << shift;
            masks.backslash |= equal(bytes, b'\\') << shift;
            masks.open |= equal(folded, b'{') << shift;
            masks.close |= equal(folded, b'}') << shift;
        }
        masks
    }

    /// [`super::prefix_xor`] as one carry-less multiplication by all ones.
    #[target_feature(enable = "pclmulqdq")]
    pub(super) fn prefix_xor(bits: u64) -> u64 {
        let product = _mm_clmulepi64_si128(_mm_set_epi64x(0, bits as i64), _mm_set1_epi8(-1), 0);
        _mm_cvtsi128_si64(product) as u64
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;

    /// Where serde says the value at the start of `text` ends.
    fn serde_end(text: &[u8]) -> usize {
        let mut stream = serde_json::Deserializer::from_slice(text).into_iter::<Value>();
        stream.next().unwrap().unwrap();
        stream.byte_offset()
    }

    /// JSON values with strings full of what the scan looks at: quotes, backslash runs,
    /// brackets, multi-byte characters.
    fn values() -> impl Strategy<Value = Value> {
        let text = "[\"\\\\{}\\[\\] a\u{e9}\u{1F600}\\n]{0,70}";
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            text.prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 64, 8, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec((text, inner), 0..8)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn a_value_ends_where_serde_says(value in values(), pad in 0usize..70, pretty: bool) {
            let written = if pretty {
                serde_json::to_string_pretty(&value).unwrap()
            } else {
                value.to_string()
            };
            // Shifted against the 64-byte blocks, and followed by more text.
            let text = format!("{}{written} , [1]", " ".repeat(pad));
            let bytes = text.as_bytes();
            let expected = pad + serde_end(&bytes[pad..]);
            prop_assert_eq!(value_end(bytes, pad), Ok(Some(expected)));
            // Cut anywhere inside, it is not over yet (or, cut inside a number, not known to be).
            for cut in pad..expected {
                let got = value_end(&bytes[..cut], pad);
                prop_assert!(got == Ok(None), "cut at {}: {:?}", cut, got);
            }
            // The scan for every x86-64 CPU finds the same ends as the one taken here.
            if matches!(bytes[pad], b'{' | b'[') {
                for cut in pad + 1..=bytes.len() {
                    prop_assert_eq!(
                        container_end_with(&bytes[..cut], pad, Masks::of, prefix_xor),
                        container_end(&bytes[..cut], pad)
                    );
                }
            }
        }

        #[test]
        fn the_masks_are_the_bytes(block in prop::array::uniform32(any::<u8>()),
                                   other in prop::array::uniform32(prop::sample::select(
                                       b"\"\\{}[]a ".to_vec()))) {
            let mut bytes = [0u8; 64];
            bytes[..32].copy_from_slice(&block);
            bytes[32..].copy_from_slice(&other);
            prop_assert_eq!(Masks::of(&bytes), Masks::portable(&bytes));
            #[cfg(target_arch = "x86_64")]
            if wide::available() {
                // SAFETY: the CPU has AVX2.
                prop_assert_eq!(unsafe { wide::masks_of(&bytes) }, Masks::portable(&bytes));
            }
        }

        #[test]
        fn a_prefix_xor_is_a_carry_less_product(bits: u64) {
            #[cfg(target_arch = "x86_64")]
            if wide::available() {
                // SAFETY: the CPU has PCLMULQDQ.
                prop_assert_eq!(unsafe { wide::prefix_xor(bits) }, prefix_xor(bits));
            }
            // Bit i is the parity of bits 0..=i.
            let expected = (0..64).fold(0u64, |acc, i| {
                acc | u64::from((bits & (u64::MAX >> (63 - i))).count_ones() % 2 == 1) << i
            });
            prop_assert_eq!(prefix_xor(bits), expected);
        }
    }

    #[test]
    fn backslash_runs_across_block_boundaries() {
        for run in 0..6 {
            for at in 56..72 {
                let inner = format!("{}{}", "x".repeat(at), "\\".repeat(2 * run));
                let text = format!(r#"{{"a": "{inner}\"}}", "b": [1]}} tail"#);
                let bytes = text.as_bytes();
                assert_eq!(
                    value_end(bytes, 0),
                    Ok(Some(serde_end(bytes))),
                    "{run} pairs at {at}"
                );
            }
        }
    }

    #[test]
    fn what_is_not_json_is_not_followed() {
        for text in [
            "tru ", "1x ", "nul,", "}", ":", "1. ", "01 ", "-,", "1e ", "1.5e+}", "+1 ",
        ] {
            assert_eq!(value_end(text.as_bytes(), 0), Err(Unfollowed), "{text}");
        }
        assert_eq!(value_end(b"123", 0), Ok(None), "a number may go on");
        assert_eq!(value_end(b"-1.5e3]", 0), Ok(Some(6)));
        assert_eq!(value_end(b"0.25E-2,", 0), Ok(Some(7)));
    }

    static MAC: Projection = Projection {
        members: &[Member::whole("mac_address")],
    };
    static MACHINE: Projection = Projection {
        members: &[
            Member::whole("system_id"),
            Member::each("interface_set", &MAC),
        ],
    };

    fn projected(text: &str) -> Result<Option<(String, usize)>, Unfollowed> {
        let mut out = Vec::new();
        Ok(project(text.as_bytes(), 0, &MACHINE, &mut out)?
            .map(|end| (String::from_utf8(out).unwrap(), end)))
    }

    #[test]
    fn a_projection_keeps_only_the_members_read() {
        let text = r#"{ "vlan": {"id": 1, "name": "x}"}, "system_id" : "abc",
            "interface_set": [ {"links": [{"a": "]"}], "mac_address": "00:11"}, {}, null ],
            "other": [1, 2, {"x": "\"{"}], "\u0073ystem_id": 5 } rest"#;
        let (out, end) = projected(text).unwrap().unwrap();
        assert_eq!(
            out,
            r#"{"system_id":"abc","interface_set":[{"mac_address":"00:11"},{},null],"\u0073ystem_id":5}"#
        );
        assert_eq!(&text[end..], " rest");
        // A member that is not an array is copied as it is.
        let (out, _) = projected(r#"{"interface_set": null}"#).unwrap().unwrap();
        assert_eq!(out, r#"{"interface_set":null}"#);
        assert_eq!(projected("{ }").unwrap().unwrap().0, "{}");
    }

    #[test]
    fn a_projection_cut_short_waits_and_a_malformed_one_is_left_to_serde() {
        let text = r#"{"system_id": "abc", "interface_set": [{"mac_address": "00:11"}], "n": 12}"#;
        for cut in 0..text.len() {
            assert_eq!(projected(&text[..cut]), Ok(None), "cut at {cut}");
        }
        for bad in [
            r#"[1]"#,
            r#"{"a" 1}"#,
            r#"{"a": 1 "b": 2}"#,
            r#"{1: 2}"#,
            r#"{"a": tru}"#,
        ] {
            assert_eq!(projected(bad), Err(Unfollowed), "{bad}");
        }
    }
}
