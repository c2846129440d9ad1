//! The HTML report's table of device memory at each device's peak by the library that asked
//! for it (`report::libraries`: PyTorch's caching allocator, a library's own, the program's).

use std::fmt::Write;

use super::flamegraph::xml_escape as esc;
use crate::report::libraries::{self, LibraryBytes};
use crate::units;

/// Device memory at each device's peak by the library that asked for it (summary's
/// `libraries_at_peak`), where more than one library asked on some device.
pub fn html(h: &mut String, libraries: &[LibraryBytes]) {
    let several = |d: i32| libraries.iter().filter(|l| l.device == d).count() > 1;
    if !libraries.iter().any(|l| several(l.device)) {
        return;
    }
    h.push_str(
        "<table><tr><th>device</th><th>library that asked (at the device's peak)</th>\
         <th class=\"num\">bytes</th><th class=\"num\">allocations</th></tr>",
    );
    for l in libraries.iter().filter(|l| several(l.device)) {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            units::device(l.device),
            esc(&libraries::name(l.library.as_deref())),
            units::bytes(l.bytes),
            l.count
        );
    }
    h.push_str("</table>");
}
