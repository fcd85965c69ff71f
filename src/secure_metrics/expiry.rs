//! When a certificate expires: its `notAfter`, read from the DER (RFC 5280's
//! `Certificate → TBSCertificate → Validity`), for `bmo_metrics_certificate_expiry_
//! timestamp_seconds`. Only the few fields before `Validity` are walked.

/// The DER element at the start of `input` if its tag is `tag`: (content, rest).
fn element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = input.split_first()?;
    if first != tag {
        return None;
    }
    let (&len, mut rest) = rest.split_first()?;
    let len = if len < 0x80 {
        usize::from(len)
    } else {
        let count = usize::from(len & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, after) = rest.split_at(count);
        rest = after;
        bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b))
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// `notAfter` of the DER certificate `der`, Unix seconds.
pub fn not_after(der: &[u8]) -> Option<i64> {
    let (certificate, _) = element(der, 0x30)?;
    let (tbs, _) = element(certificate, 0x30)?;
    // [0] version (optional), serialNumber, signature, issuer, then validity.
    let mut rest = element(tbs, 0xa0).map_or(tbs, |(_, rest)| rest);
    for tag in [0x02, 0x30, 0x30] {
        rest = element(rest, tag)?.1;
    }
    let (validity, _) = element(rest, 0x30)?;
    let time = |input| element(input, 0x17).or_else(|| element(input, 0x18));
    let (_, after_not_before) = time(validity)?;
    let generalized = after_not_before.first() == Some(&0x18);
    let (not_after, _) = time(after_not_before)?;
    unix_seconds(std::str::from_utf8(not_after).ok()?, generalized)
}

/// UTCTime `YYMMDDHHMMSSZ` or GeneralizedTime `YYYYMMDDHHMMSSZ` as Unix seconds.
fn unix_seconds(text: &str, generalized: bool) -> Option<i64> {
    let digits = text.strip_suffix('Z')?;
    let (year, rest) = if generalized {
        (digits.get(..4)?.parse::<i64>().ok()?, digits.get(4..)?)
    } else {
        let yy: i64 = digits.get(..2)?.parse().ok()?;
        (
            if yy < 50 { 2000 + yy } else { 1900 + yy },
            digits.get(2..)?,
        )
    };
    let field = |i: usize| rest.get(i..i + 2)?.parse::<i64>().ok();
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    // Days from 1970-01-01 to the date (the proleptic Gregorian calendar).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_not_after_of_a_made_certificate() {
        let mut params =
            rcgen::CertificateParams::new(vec!["bmo.example".to_owned()]).expect("params");
        params.not_after = rcgen::date_time_ymd(2031, 3, 4);
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("certificate");
        // 2031-03-04T00:00:00Z.
        assert_eq!(not_after(cert.der()), Some(1_930_348_800));
        // GeneralizedTime, after 2049.
        params.not_after = rcgen::date_time_ymd(4096, 1, 1);
        let cert = params.self_signed(&key).expect("certificate");
        assert_eq!(not_after(cert.der()), Some(67_090_118_400));
        assert_eq!(not_after(b"\x30\x03\x02\x01\x00"), None);
    }

    #[test]
    fn utc_time_before_2050_and_after() {
        assert_eq!(unix_seconds("700101000000Z", false), Some(0));
        assert_eq!(unix_seconds("491231235959Z", false), Some(2_524_607_999));
        assert_eq!(unix_seconds("20000229120000Z", true), Some(951_825_600));
        assert_eq!(unix_seconds("2000022912000", true), None);
    }
}
