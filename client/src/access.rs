//! Identities and access control from the client's side (SPEC "Access
//! control"): who this client acts as, the rules, bearer tokens.

use leasehold_protocol::access::{BearerToken, Identity, Rule, TokenInfo};
use leasehold_protocol::{Request, Response};

use crate::client::{unexpected, Client};
use crate::error::ClientError;

impl Client {
    /// Who this client's connection acts as, and whether access control
    /// is on (`ID-3`).
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), leasehold::ClientError> {
    /// use leasehold::{Client, ClientConfig};
    ///
    /// let config = ClientConfig {
    ///     token: Some(std::fs::read_to_string("ci.token").unwrap_or_default()),
    ///     ..ClientConfig::default()
    /// };
    /// let client = Client::connect_with("127.0.0.1:7171", config).await?;
    /// println!("{}", client.who_am_i().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn who_am_i(&self) -> Result<Identity, ClientError> {
        match self.call(Request::WhoAmI).await? {
            Response::Identity(identity) => Ok(identity),
            other => Err(unexpected(other)),
        }
    }

    /// Sets `rule`, replacing the rule its prefix and principal had
    /// (`ACL-1`); needs `admin` on the prefix. Returns the index of the
    /// change.
    pub async fn set_rule(&self, rule: Rule) -> Result<u64, ClientError> {
        self.access_change(Request::SetRule(rule)).await
    }

    /// Removes the rule of `prefix` and `principal` (`ACL-1`).
    pub async fn remove_rule(&self, prefix: &str, principal: &str) -> Result<u64, ClientError> {
        let request = Request::RemoveRule {
            prefix: prefix.to_string(),
            principal: principal.to_string(),
        };
        self.access_change(request).await
    }

    /// Every rule, by prefix then principal, and whether access control is
    /// on (`ACL-6`).
    pub async fn rules(&self) -> Result<(Vec<Rule>, bool), ClientError> {
        match self.call(Request::ListRules).await? {
            Response::Rules { rules, enabled } => Ok((rules, enabled)),
            other => Err(unexpected(other)),
        }
    }

    /// Turns access control on or off (`ACL-5`). Turning it on is refused
    /// unless this client would keep `admin` on every key.
    pub async fn set_access_control(&self, enabled: bool) -> Result<u64, ClientError> {
        self.access_change(Request::SetAccessControl { enabled })
            .await
    }

    /// Creates a bearer token for `principal` (`TOK-1`). Its text
    /// (`token.to_string()`) is shown here alone: the master keeps only a
    /// hash of it.
    pub async fn create_token(
        &self,
        principal: &str,
        note: &str,
    ) -> Result<BearerToken, ClientError> {
        let request = Request::CreateToken {
            principal: principal.to_string(),
            note: note.to_string(),
        };
        match self.call(request).await? {
            Response::TokenCreated { token, .. } => Ok(token),
            other => Err(unexpected(other)),
        }
    }

    /// Revokes token `id` (`TOK-3`): connections that authenticated with it
    /// lose its rights at once.
    pub async fn revoke_token(&self, id: u64) -> Result<u64, ClientError> {
        self.access_change(Request::RevokeToken { id }).await
    }

    /// Every live token, without secrets (`TOK-4`).
    pub async fn tokens(&self) -> Result<Vec<TokenInfo>, ClientError> {
        match self.call(Request::ListTokens).await? {
            Response::Tokens(tokens) => Ok(tokens),
            other => Err(unexpected(other)),
        }
    }

    async fn access_change(&self, request: Request) -> Result<u64, ClientError> {
        match self.call(request).await? {
            Response::AccessChanged { index } => Ok(index),
            other => Err(unexpected(other)),
        }
    }
}
