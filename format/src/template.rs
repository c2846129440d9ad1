//! The trace path template (`%p %h %r %t %%`), shared by both sides: the shim names its
//! trace with it (`GPUMEMPROF_OUTPUT`), and `gpumemprof run` predicts the names a job's
//! processes will use before they start.

/// Where a rank comes from, first set and non-empty wins (torchrun, then SLURM); else 0.
pub const RANK_VARS: [&str; 3] = ["RANK", "LOCAL_RANK", "SLURM_PROCID"];

/// Values substituted into the template.
pub struct Placeholders {
    pub pid: u32,
    pub host: String,
    pub rank: String,
    pub time: String,
}

impl Placeholders {
    /// For process `pid` at `unix_secs`, the rank read through `env`.
    pub fn new(pid: u32, unix_secs: u64, env: impl Fn(&str) -> Option<String>) -> Placeholders {
        let rank = RANK_VARS
            .iter()
            .find_map(|k| env(k).filter(|v| !v.trim().is_empty()))
            .unwrap_or_else(|| "0".to_string());
        Placeholders {
            pid,
            host: hostname(),
            rank,
            time: utc_stamp(unix_secs),
        }
    }
}

/// Expands `%p`, `%h`, `%r`, `%t` and `%%`; any other `%x` is kept as written.
pub fn expand(template: &str, ph: &Placeholders) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&ph.pid.to_string()),
            Some('h') => out.push_str(&ph.host),
            Some('r') => out.push_str(&ph.rank),
            Some('t') => out.push_str(&ph.time),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

/// This machine's host name (`unknown` if it cannot be read).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buffer and length match; gethostname NUL-terminates when it fits.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len() - 1) };
    if rc != 0 {
        return "unknown".to_string();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// `YYYYmmdd-HHMMSS` in UTC.
pub fn utc_stamp(secs: u64) -> String {
    let t = secs as libc::time_t;
    // SAFETY: a zeroed tm is a valid out-buffer for gmtime_r; both pointers are valid.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    unsafe { libc::gmtime_r(&t, &mut tm) };
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ph() -> Placeholders {
        Placeholders {
            pid: 42,
            host: "node7".into(),
            rank: "3".into(),
            time: "20260102-030405".into(),
        }
    }

    #[test]
    fn placeholders_expand_and_others_stay() {
        assert_eq!(
            expand("/t/%h-%p-r%r-%t.trace", &ph()),
            "/t/node7-42-r3-20260102-030405.trace"
        );
        assert_eq!(expand("100%%-%x-%", &ph()), "100%-%x-%");
    }

    #[test]
    fn rank_from_the_first_set_variable() {
        let p = Placeholders::new(1, 0, |k| (k == "LOCAL_RANK").then(|| "5".to_string()));
        assert_eq!(p.rank, "5");
        assert_eq!(Placeholders::new(1, 0, |_| None).rank, "0");
    }

    #[test]
    fn utc_stamp_of_a_known_instant() {
        assert_eq!(utc_stamp(1_767_323_045), "20260102-030405");
    }
}
