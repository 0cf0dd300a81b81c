//! How keys and values are written on the command line and printed.

use base64::Engine as _;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Text; a byte that is not printable UTF-8 (and a backslash) is
    /// written `\xNN` (`\\`), and read back the same way.
    Utf8,
    /// Two lowercase hex digits per byte.
    Hex,
    /// Standard base64 with padding.
    Base64,
}

impl Encoding {
    /// The bytes `text` stands for.
    pub fn decode(self, text: &str) -> Result<Vec<u8>, String> {
        match self {
            Encoding::Utf8 => unescape(text),
            Encoding::Hex => {
                if !text.len().is_multiple_of(2) {
                    return Err(format!("odd number of hex digits in {text:?}"));
                }
                (0..text.len())
                    .step_by(2)
                    .map(|i| {
                        text.get(i..i + 2)
                            .and_then(|d| u8::from_str_radix(d, 16).ok())
                            .ok_or_else(|| format!("not hex: {text:?}"))
                    })
                    .collect()
            }
            Encoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| format!("not base64 ({e}): {text:?}")),
        }
    }

    /// `bytes`, written in this encoding.
    pub fn encode(self, bytes: &[u8]) -> String {
        match self {
            Encoding::Utf8 => escape(bytes),
            Encoding::Hex => bytes.iter().map(|b| format!("{b:02x}")).collect(),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }
}

fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => {
                    let mut buf = [0u8; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        out.push_str(&format!("\\x{b:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

fn unescape(text: &str) -> Result<Vec<u8>, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        match bytes.get(i + 1) {
            Some(b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            Some(b'x') => {
                let b = text
                    .get(i + 2..i + 4)
                    .and_then(|d| u8::from_str_radix(d, 16).ok())
                    .ok_or_else(|| format!("bad \\x escape in {text:?}"))?;
                out.push(b);
                i += 4;
            }
            _ => return Err(format!("bad escape in {text:?} (use \\\\ or \\xNN)")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_encoding_round_trips_any_bytes() {
        let samples: [&[u8]; 5] = [
            b"",
            b"plain key",
            b"back\\slash",
            b"\x00\xff\n\t",
            "é✓".as_bytes(),
        ];
        for enc in [Encoding::Utf8, Encoding::Hex, Encoding::Base64] {
            for s in samples {
                let text = enc.encode(s);
                assert_eq!(
                    enc.decode(&text).as_deref(),
                    Ok(s),
                    "{enc:?} of {s:?} as {text:?}"
                );
            }
        }
        assert_eq!(Encoding::Utf8.encode(b"a\x00b\\"), "a\\x00b\\\\");
        assert_eq!(Encoding::Hex.encode(b"\x01\xab"), "01ab");
        assert!(Encoding::Hex.decode("abc").is_err());
        assert!(Encoding::Utf8.decode("bad \\q").is_err());
    }
}
