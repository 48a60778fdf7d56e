//! JSON files: every program writes its result with [`write_json`] and whoever reads it back
//! (the lab, a test) uses [`read_json`] on the same type. JSON has no NaN or infinity:
//! `serde_json` writes them as `null`, and [`num`] reads `null` back as NaN.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// Reads a JSON file written by [`write_json`].
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))
}

/// Reads a number that may have been written as `null`: JSON has no NaN or infinity, so
/// `serde_json` writes them as `null`; they come back as NaN. Use as
/// `#[serde(deserialize_with = "softtimers_tools::json::num")]` on an `f64` that may be NaN.
pub fn num<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// [`num`] for a pair of numbers.
pub fn num_pair<'de, D: Deserializer<'de>>(d: D) -> Result<(f64, f64), D::Error> {
    let (a, b) = <(Option<f64>, Option<f64>)>::deserialize(d)?;
    Ok((a.unwrap_or(f64::NAN), b.unwrap_or(f64::NAN)))
}

/// [`num`] for a list of numbers (each round's figure, say).
pub fn nums<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    let v = Vec::<Option<f64>>::deserialize(d)?;
    Ok(v.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nulls_read_back_as_nan() {
        #[derive(serde::Deserialize)]
        struct Row {
            #[serde(deserialize_with = "num")]
            x: f64,
            #[serde(deserialize_with = "num_pair")]
            r: (f64, f64),
            #[serde(deserialize_with = "nums")]
            v: Vec<f64>,
        }
        let row: Row =
            serde_json::from_str(r#"{"x": null, "r": [1.5, null], "v": [2.0, null]}"#).unwrap();
        assert!(row.x.is_nan());
        assert_eq!(row.r.0, 1.5);
        assert!(row.r.1.is_nan());
        assert_eq!(row.v.len(), 2);
        assert!(row.v[0] == 2.0 && row.v[1].is_nan());
        let text = serde_json::to_string(&f64::NAN).unwrap();
        assert_eq!(text, "null", "what the writer does, and why `num` exists");
    }
}
