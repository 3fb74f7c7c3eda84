//! Session labels: tags a session carries and ListSessions filters by.

use wsfs::{Error, Result};

/// Labels a session may carry, and a ListSessions filter may name.
pub const MAX_LABELS: usize = 64;
/// Bytes of one label's key or value.
pub const MAX_LABEL_BYTES: usize = 256;

/// Refuses, before they are stored or matched against every session,
/// labels past [`MAX_LABELS`] or a key or value past [`MAX_LABEL_BYTES`]:
/// a label is a tag, not a payload.
pub fn check_labels<'a>(
    labels: impl ExactSizeIterator<Item = (&'a String, &'a String)>,
) -> Result<()> {
    if labels.len() > MAX_LABELS {
        return Err(Error::invalid_argument(format!(
            "{} labels; at most {MAX_LABELS} are allowed",
            labels.len()
        )));
    }
    for (key, value) in labels {
        if key.len() > MAX_LABEL_BYTES || value.len() > MAX_LABEL_BYTES {
            return Err(Error::invalid_argument(format!(
                "the label '{}' is longer than {MAX_LABEL_BYTES} bytes (key or value)",
                wsfs::path::quote(key)
            )));
        }
    }
    Ok(())
}
