//! The principal a client certificate names (`ID-1`): the subject's
//! common name (CN), as etcd takes it. The certificate was verified by
//! TLS before it is read here; the reader is still defensive, as DER is
//! input from the network.

use leasehold_protocol::access::check_principal;

/// A DER element: its tag and contents, and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let count = (first & 0x7f) as usize;
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |len, b| (len << 8) | *b as usize);
        (len, &rest[count..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
/// The `[0]` version that opens a v3 certificate's to-be-signed part.
const VERSION: u8 = 0xa0;
/// 2.5.4.3, commonName.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
const OID: u8 = 0x06;
/// UTF8String, PrintableString, IA5String: the strings a CN comes in.
const STRINGS: [u8; 3] = [0x0c, 0x13, 0x16];

/// The subject's common name in a DER certificate, if it has one that is
/// a valid principal name.
pub(crate) fn common_name(der: &[u8]) -> Option<String> {
    let (SEQUENCE, certificate, _) = element(der)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = element(certificate)? else {
        return None;
    };
    let mut rest = tbs;
    let (tag, _, after) = element(rest)?;
    if tag == VERSION {
        rest = after;
    }
    // serialNumber, signature, issuer, validity, then the subject.
    for _ in 0..4 {
        rest = element(rest)?.2;
    }
    let (SEQUENCE, mut names, _) = element(rest)? else {
        return None;
    };
    let mut found = None;
    while !names.is_empty() {
        let (tag, rdn, after) = element(names)?;
        names = after;
        if tag != SET {
            return None;
        }
        let (SEQUENCE, pair, _) = element(rdn)? else {
            return None;
        };
        let (OID, oid, value) = element(pair)? else {
            return None;
        };
        if oid == COMMON_NAME {
            let (tag, text, _) = element(value)?;
            if STRINGS.contains(&tag) {
                // The last CN is the most specific, as most readers take it.
                found = std::str::from_utf8(text).ok().map(str::to_string);
            }
        }
    }
    found.filter(|name| check_principal(name).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(name: Option<&str>) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Leasehold tests");
        if let Some(name) = name {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
        }
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    // ID-1
    #[test]
    fn a_certificates_common_name_is_its_principal() {
        assert_eq!(
            common_name(&certificate(Some("ci-runner"))).as_deref(),
            Some("ci-runner")
        );
    }

    #[test]
    fn a_certificate_without_a_common_name_names_no_principal() {
        assert_eq!(common_name(&certificate(None)), None);
    }

    #[test]
    fn garbage_names_no_principal() {
        assert_eq!(common_name(b""), None);
        assert_eq!(common_name(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        let cert = certificate(Some("x"));
        for cut in 0..cert.len() {
            let _ = common_name(&cert[..cut]);
        }
    }
}
