//! Civil dates and Unix days (Howard Hinnant's algorithms), so the CLI and the dashboard can
//! print and read UTC dates without a date library.

/// (year, month, day) of a count of days since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Days since 1970-01-01 of a civil date.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let (m, d) = (i64::from(month), i64::from(day));
    let y = if m <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A time [`parse_time`] cannot read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeError {
    pub text: String,
}

impl std::fmt::Display for TimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "time {:?}: use YYYY-MM-DD, YYYY-MM-DDTHH:MM (UTC), Unix seconds, now, or -N followed by m, h or d",
            self.text
        )
    }
}

impl std::error::Error for TimeError {}

/// A time as the CLI's flags take it (YYYY-MM-DD, YYYY-MM-DDTHH:MM in UTC, Unix seconds,
/// `now`, or -N[mhd] before `now`), in Unix seconds.
pub fn parse_time(text: &str, now: u64) -> Result<u64, TimeError> {
    let bad = || TimeError { text: text.to_string() };
    let text = text.trim();
    if text == "now" {
        return Ok(now);
    }
    if let Some(ago) = text.strip_prefix('-') {
        let (n, unit) = ago.split_at(ago.len().saturating_sub(1));
        let n: u64 = n.parse().map_err(|_| bad())?;
        let seconds = match unit {
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => return Err(bad()),
        };
        return n.checked_mul(seconds).map(|s| now.saturating_sub(s)).ok_or_else(bad);
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map_err(|_| bad());
    }
    let (date, clock) = text.split_once('T').unwrap_or((text, "00:00"));
    let parts: Vec<&str> = date.split('-').collect();
    let [y, m, d] = parts[..] else { return Err(bad()) };
    let (y, m, d): (i64, u32, u32) =
        (y.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?, d.parse().map_err(|_| bad())?);
    let (hh, mm) = clock.split_once(':').ok_or_else(bad)?;
    let (hh, mm): (i64, i64) = (hh.parse().map_err(|_| bad())?, mm.parse().map_err(|_| bad())?);
    if !(1970..=9999).contains(&y) || !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 {
        return Err(bad());
    }
    let seconds = days_from_civil(y, m, d) * 86_400 + hh * 3600 + mm * 60;
    u64::try_from(seconds).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2026, 11, 1), 20_758);
        assert_eq!(civil_from_days(20_758), (2026, 11, 1));
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn flag_times_parse_in_every_documented_form() {
        let now = 1_795_000_000;
        assert_eq!(parse_time("2026-11-01", now), Ok(1_793_491_200));
        assert_eq!(parse_time("2026-11-01T06:30", now), Ok(1_793_491_200 + 6 * 3600 + 1800));
        assert_eq!(parse_time("1970-01-01", now), Ok(0));
        assert_eq!(parse_time("-2h", now), Ok(now - 7200));
        assert_eq!(parse_time("-7d", now), Ok(now - 7 * 86_400));
        assert_eq!(parse_time("now", now), Ok(now));
        assert_eq!(parse_time("12345", now), Ok(12_345));
        for bad in ["yesterday", "2026-13-01", "2026-11", "-5y", "-h", "2026-11-01T25:00", "-99999999999999999d"] {
            assert!(parse_time(bad, now).is_err(), "{bad}");
        }
    }
}
