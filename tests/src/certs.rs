//! Certificates made at run time for TLS tests: a CA, a master's
//! certificate for 127.0.0.1 and `localhost` it signed, a client's, three
//! cell members' (`CELL-11`), and the same from a second CA nobody
//! trusts.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate and its key, written as PEM files.
#[derive(Debug, Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A CA and what it signed, in a directory of their own.
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca: PathBuf,
    pub server: Pair,
    pub client: Pair,
    /// Members 1 to 3 of a cell: named `leasehold-member-<id>`, for
    /// 127.0.0.1, for both ends of a link.
    pub members: Vec<Pair>,
    dir: PathBuf,
    name: String,
    /// The CA's own parameters and key (PEM), to sign more later.
    ca_params: CertificateParams,
    ca_key: String,
}

impl Pki {
    /// A new CA named `name`, with a server and a client certificate it
    /// signed, written under `dir` as `NAME-ca.pem`, `NAME-server.pem` ...
    pub fn new(dir: impl AsRef<Path>, name: &str) -> Pki {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} CA"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let ca = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&ca, ca_cert.pem()).unwrap();
        let ca_key_pem = ca_key.serialize_pem();
        let issuer = Issuer::new(ca_params.clone(), ca_key);
        let server = signed(
            dir,
            &format!("{name}-server"),
            vec!["127.0.0.1".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
            &issuer,
        );
        let client = signed(
            dir,
            &format!("{name}-client"),
            vec!["client.leasehold.test".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            &issuer,
        );
        let members = (1..=3)
            .map(|id| {
                let file = format!("{name}-member-{id}");
                let pair = signed_as(
                    dir,
                    &file,
                    &format!("leasehold-member-{id}"),
                    vec!["127.0.0.1".into()],
                    vec![
                        ExtendedKeyUsagePurpose::ServerAuth,
                        ExtendedKeyUsagePurpose::ClientAuth,
                    ],
                    &issuer,
                );
                pair
            })
            .collect();
        Pki {
            ca,
            server,
            client,
            members,
            dir: dir.to_path_buf(),
            name: name.to_string(),
            ca_params,
            ca_key: ca_key_pem,
        }
    }

    /// A client certificate this CA signed whose common name, and so
    /// whose principal (`ID-1`), is `principal`.
    pub fn client_named(&self, principal: &str) -> Pair {
        let key = KeyPair::from_pem(&self.ca_key).expect("the CA's own key");
        let issuer = Issuer::new(self.ca_params.clone(), key);
        let file: String = principal
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        signed_as(
            &self.dir,
            &format!("{}-principal-{file}", self.name),
            principal,
            vec!["client.leasehold.test".into()],
            vec![ExtendedKeyUsagePurpose::ClientAuth],
            &issuer,
        )
    }
}

fn signed(
    dir: &Path,
    name: &str,
    names: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
    issuer: &Issuer<'_, KeyPair>,
) -> Pair {
    signed_as(dir, name, name, names, vec![usage], issuer)
}

/// A certificate with common name `common`, written as `file.pem` and
/// `file.key`.
fn signed_as(
    dir: &Path,
    name: &str,
    common: &str,
    names: Vec<String>,
    usages: Vec<ExtendedKeyUsagePurpose>,
    issuer: &Issuer<'_, KeyPair>,
) -> Pair {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(names).unwrap();
    params.distinguished_name.push(DnType::CommonName, common);
    params.extended_key_usages = usages;
    let cert = params.signed_by(&key, issuer).unwrap();
    let pair = Pair {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
    };
    std::fs::write(&pair.cert, cert.pem()).unwrap();
    std::fs::write(&pair.key, key.serialize_pem()).unwrap();
    pair
}
