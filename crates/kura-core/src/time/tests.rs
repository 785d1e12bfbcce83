use std::time::Duration;

use jiff::Timestamp;

use super::*;

/// Every form the hand-written parser took, read to the same duration.
#[test]
fn every_duration_the_old_parser_took_reads_the_same() {
    let secs = Duration::from_secs;
    for (input, expected) in [
        ("0", secs(0)),
        ("90", secs(90)),
        ("0s", secs(0)),
        ("90s", secs(90)),
        ("290s", secs(290)),
        ("500ms", Duration::from_millis(500)),
        ("0ms", secs(0)),
        ("10m", secs(600)),
        ("90m", secs(5400)),
        ("1h", secs(3600)),
        ("72h", secs(72 * 3600)),
        ("168h", secs(168 * 3600)),
        ("007s", secs(7)),
        (" 10m ", secs(600)),
        ("\t15s\n", secs(15)),
        ("18446744073709551615", secs(u64::MAX)),
        ("9223372036854775807s", secs(i64::MAX as u64)),
    ] {
        assert_eq!(parse_duration(input), Ok(expected), "{input:?}");
    }
}

#[test]
fn combined_and_iso_durations_read() {
    let secs = Duration::from_secs;
    for (input, expected) in [
        ("1h30m", secs(5400)),
        ("1h 30m", secs(5400)),
        ("2h0m15s", secs(7215)),
        ("1m30s", secs(90)),
        ("1.5h", secs(5400)),
        ("1s500ms", Duration::from_millis(1500)),
        ("PT1H30M", secs(5400)),
        ("PT10S", secs(10)),
        ("90 minutes", secs(5400)),
    ] {
        assert_eq!(parse_duration(input), Ok(expected), "{input:?}");
    }
}

#[test]
fn a_negative_duration_is_refused_as_negative() {
    for input in ["-1h", "-90s", "1h ago", "-PT1M"] {
        let err = parse_duration(input).unwrap_err();
        assert!(err.contains("is negative"), "{input:?}: {err}");
    }
}

#[test]
fn what_is_no_duration_is_refused_saying_what_one_looks_like() {
    for input in [
        "",
        " ",
        "s",
        "h1",
        "10x",
        "1d",
        "1w",
        "P1D",
        "30m1h",
        "1m1m",
        "1e3s",
        "ten minutes",
        "10 m s",
        "18446744073709551616",
    ] {
        let err = parse_duration(input).unwrap_err();
        assert!(
            err.contains("is not a duration such as 90s, 10m or 1h30m"),
            "{input:?}: {err}"
        );
    }
}

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

#[test]
fn an_rfc3339_time_reads_as_the_apiserver_reads_it() {
    for (input, expected) in [
        ("2026-12-24T18:00:00Z", t("2026-12-24T18:00:00Z")),
        ("2026-12-24T18:00:00+14:00", t("2026-12-24T04:00:00Z")),
        ("2026-12-24T18:00:00-23:59", t("2026-12-25T17:59:00Z")),
        ("2026-12-24T18:00:00-00:00", t("2026-12-24T18:00:00Z")),
        ("2024-02-29T00:00:00Z", t("2024-02-29T00:00:00Z")),
        ("2026-12-24T18:00:00.5Z", t("2026-12-24T18:00:00.5Z")),
        // Go cuts a fraction past nanoseconds; it does not round.
        (
            "2026-12-24T18:00:00.1234567899999Z",
            t("2026-12-24T18:00:00.123456789Z"),
        ),
        // Go reads an offset of 24 hours, and of 60 minutes.
        ("2026-12-24T18:00:00+24:00", t("2026-12-23T18:00:00Z")),
        ("2026-12-24T18:00:00-23:60", t("2026-12-25T18:00:00Z")),
        ("2026-12-24T18:00:00+24:60", t("2026-12-23T17:00:00Z")),
        ("0001-01-01T00:00:00Z", t("0001-01-01T00:00:00Z")),
        ("0000-12-31T23:00:00-01:00", t("0001-01-01T00:00:00Z")),
    ] {
        assert_eq!(rfc3339(input), Ok(expected), "{input:?}");
    }
}

/// Past jiff's last instant (9999-12-30T22:00Z) but within the apiserver's
/// range: the end of time, which never comes.
#[test]
fn a_time_past_jiffs_range_is_the_end_of_time() {
    for input in [
        "9999-12-31T23:59:59Z",
        "9999-12-31T23:59:59.999999999Z",
        "9999-12-30T22:00:01Z",
        "9999-12-31T23:59:59+14:00",
        "9999-12-31T23:59:59+24:60",
    ] {
        assert_eq!(rfc3339(input), Ok(Timestamp::MAX), "{input:?}");
    }
    assert_eq!(
        rfc3339("9999-12-30T22:00:00.999999999Z"),
        Ok(Timestamp::MAX)
    );
    assert!(rfc3339("9999-12-30T21:59:59Z").unwrap() < Timestamp::MAX);
}

#[test]
fn what_the_apiserver_refuses_is_refused_with_the_reason() {
    for (input, why) in [
        ("2026-12-24t18:00:00z", ""),
        ("2026-12-24T18:00:00z", ""),
        ("2026-12-24 18:00:00Z", ""),
        ("2026-12-24T18:00Z", ""),
        ("2026-12-24T18:00:00", ""),
        ("2026-12-24T18:00:00+0100", ""),
        ("2026-12-24T18:00:00.Z", ""),
        ("+2026-12-24T18:00:00Z", ""),
        // Longer than the CRDs' maxLength.
        ("2026-12-24T18:00:00.12345678901234567890Z", ""),
        ("2016-12-31T23:59:60Z", "no leap second"),
        ("2026-12-24T24:00:00Z", "time of day"),
        ("2026-12-24T18:60:00Z", "time of day"),
        ("2026-02-29T00:00:00Z", "no such date"),
        ("2026-13-01T00:00:00Z", "no such date"),
        ("2026-00-01T00:00:00Z", "no such date"),
        ("2026-12-00T00:00:00Z", "no such date"),
        ("2026-12-24T18:00:00+25:00", "offset"),
        ("2026-12-24T18:00:00+00:61", "offset"),
        ("0000-01-01T00:00:00Z", "years 1 to 9999"),
        ("0001-01-01T00:00:00+00:01", "years 1 to 9999"),
        ("9999-12-31T23:59:59-00:01", "years 1 to 9999"),
    ] {
        let err = rfc3339(input).unwrap_err();
        assert!(
            err.contains("is not an RFC 3339 time such as 2026-12-24T18:00:00Z")
                && err.contains(why),
            "{input:?}: {err}"
        );
    }
}
