//! The HTML report's table of kinds of memory: PyTorch's tensors at their allocated peak,
//! by kind (`kinds`), one table per device.

use std::fmt::Write;

use crate::report::summary::AllocatorRow;
use crate::units;

/// The tables, or nothing when no device has kinds.
pub fn html(h: &mut String, allocators: &[AllocatorRow]) {
    for a in allocators {
        let Some(kinds) = &a.kinds_at_peak else {
            continue;
        };
        let _ = write!(
            h,
            "<h3>GPU {}: the allocated peak by kind of memory</h3>\
             <table class=\"kinds\"><tr><th>kind</th><th class=\"num\">bytes</th>\
             <th class=\"num\">tensors</th><th class=\"num\">share</th></tr>",
            a.device
        );
        for k in kinds.iter().filter(|k| k.tensors > 0) {
            let share = if a.allocated_peak_bytes == 0 {
                0.0
            } else {
                k.bytes as f64 * 100.0 / a.allocated_peak_bytes as f64
            };
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{share:.1}%</td></tr>",
                k.kind,
                units::bytes(k.bytes),
                k.tensors
            );
        }
        h.push_str("</table>");
    }
}
