//! Block compression (docs/format.md §Block trailer): a table's data block
//! may be stored compressed, the trailer's type byte naming the codec. A
//! compressed block's bytes are the varint length of its raw bytes, then
//! the codec's output for them.
//!
//! A block is kept compressed only where that saves at least an eighth of
//! it (incompressible data costs one failed attempt per block, and reads
//! of it nothing), and only up to `COMPRESSED_RAW_MAX` raw bytes, which
//! bounds what a damaged block can make a reader allocate.

use super::coding::{Reader, put_varint};
use crate::options::Compression;

/// Block type byte: stored as is. Persisted.
pub const BLOCK_TYPE_RAW: u8 = 0;
/// Block type byte: LZ4 block format (`lz4_flex`). Persisted.
pub const BLOCK_TYPE_LZ4: u8 = 1;
/// Block type byte: Zstandard frame (`zstd`). Persisted.
pub const BLOCK_TYPE_ZSTD: u8 = 2;

/// Most raw bytes of a block stored compressed; larger blocks are stored
/// as they are. A reader refuses a compressed block claiming more before
/// allocating for it.
pub const COMPRESSED_RAW_MAX: usize = 16 << 20;

/// `raw` compressed as `how` says into `out` (cleared first), and the type
/// byte to store it under; `BLOCK_TYPE_RAW` (and `out` to be ignored) if
/// compression is off, failed, or would not save an eighth of `raw`.
pub fn compress(how: Compression, raw: &[u8], out: &mut Vec<u8>) -> u8 {
    out.clear();
    if how == Compression::None || raw.len() > COMPRESSED_RAW_MAX || raw.is_empty() {
        return BLOCK_TYPE_RAW;
    }
    put_varint(out, raw.len() as u64);
    let ty = match how {
        Compression::None => return BLOCK_TYPE_RAW,
        Compression::Lz4 => {
            let at = out.len();
            out.resize(at + lz4_flex::block::get_maximum_output_size(raw.len()), 0);
            let Some(into) = out.get_mut(at..) else {
                return BLOCK_TYPE_RAW;
            };
            match lz4_flex::block::compress_into(raw, into) {
                Ok(n) => out.truncate(at + n),
                Err(_) => return BLOCK_TYPE_RAW,
            }
            BLOCK_TYPE_LZ4
        }
        Compression::Zstd(level) => match zstd::bulk::compress(raw, level) {
            Ok(packed) => {
                out.extend_from_slice(&packed);
                BLOCK_TYPE_ZSTD
            }
            Err(_) => return BLOCK_TYPE_RAW,
        },
    };
    if out.len() > raw.len() - raw.len() / 8 {
        return BLOCK_TYPE_RAW;
    }
    ty
}

/// The raw bytes of a block stored under type `ty` (not `BLOCK_TYPE_RAW`);
/// `Err(detail)` for an unknown type or bytes that do not decompress to
/// exactly the length they claim (at most `COMPRESSED_RAW_MAX`, checked
/// before allocating).
pub fn decompress(ty: u8, stored: &[u8]) -> Result<Vec<u8>, String> {
    let mut r = Reader::new(stored);
    let claimed = r.varint().ok_or("compressed block length truncated")?;
    let len = usize::try_from(claimed)
        .ok()
        .filter(|&n| n <= COMPRESSED_RAW_MAX && n > 0)
        .ok_or_else(|| format!("compressed block claims {claimed} raw bytes"))?;
    let body = stored.get(r.pos()..).unwrap_or_default();
    let raw = match ty {
        BLOCK_TYPE_LZ4 => {
            let mut raw = vec![0u8; len];
            let n = lz4_flex::block::decompress_into(body, &mut raw)
                .map_err(|e| format!("LZ4 block does not decompress: {e}"))?;
            raw.truncate(n);
            raw
        }
        BLOCK_TYPE_ZSTD => zstd::bulk::decompress(body, len)
            .map_err(|e| format!("Zstandard block does not decompress: {e}"))?,
        other => return Err(format!("unknown block type {other}")),
    };
    if raw.len() != len {
        return Err(format!(
            "compressed block holds {} raw bytes, not the {len} it claims",
            raw.len()
        ));
    }
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compressible(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| b"abcdefgh"[i % 8] ^ (i / 512) as u8)
            .collect()
    }

    #[test]
    fn each_codec_round_trips_and_shrinks_compressible_blocks() {
        let raw = compressible(4096);
        for (how, want) in [
            (Compression::Lz4, BLOCK_TYPE_LZ4),
            (Compression::Zstd(3), BLOCK_TYPE_ZSTD),
        ] {
            let mut out = Vec::new();
            assert_eq!(compress(how, &raw, &mut out), want);
            assert!(out.len() < raw.len() / 2, "{how:?}: {} bytes", out.len());
            assert_eq!(decompress(want, &out).expect("decompresses"), raw);
        }
        let mut out = Vec::new();
        assert_eq!(compress(Compression::None, &raw, &mut out), BLOCK_TYPE_RAW);
    }

    #[test]
    fn incompressible_blocks_stay_raw() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let raw: Vec<u8> = (0..4096)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let mut out = Vec::new();
        assert_eq!(compress(Compression::Lz4, &raw, &mut out), BLOCK_TYPE_RAW);
        assert_eq!(
            compress(Compression::Zstd(3), &raw, &mut out),
            BLOCK_TYPE_RAW
        );
    }

    #[test]
    fn bad_compressed_blocks_are_refused_without_allocating_their_claim() {
        let raw = compressible(4096);
        let mut out = Vec::new();
        let ty = compress(Compression::Lz4, &raw, &mut out);
        // A claim past the bound, a wrong claim, a cut body, garbage.
        let mut huge = Vec::new();
        put_varint(&mut huge, u64::MAX);
        assert!(decompress(ty, &huge).is_err());
        let mut big = Vec::new();
        put_varint(&mut big, (COMPRESSED_RAW_MAX + 1) as u64);
        assert!(decompress(ty, &big).is_err());
        let mut wrong = Vec::new();
        put_varint(&mut wrong, 4000);
        wrong.extend_from_slice(out.get(2..).expect("a body"));
        assert!(decompress(ty, &wrong).is_err());
        assert!(decompress(ty, &out[..out.len() / 2]).is_err());
        assert!(decompress(BLOCK_TYPE_ZSTD, &out).is_err());
        assert!(decompress(9, &out).is_err());
        for cut in 0..out.len() {
            let _ = decompress(BLOCK_TYPE_LZ4, &out[..cut]);
            let _ = decompress(BLOCK_TYPE_ZSTD, &out[..cut]);
        }
    }
}
