//! Who may read the secured `/metrics`, as controller-runtime's authentication and
//! authorisation filter decides: the bearer token must be one the API server accepts
//! (TokenReview) and whose user it allows `get` on the non-resource URL `/metrics`
//! (SubjectAccessReview).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

/// What the API server said of a request's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Authenticated and allowed to read `/metrics`.
    Allowed,
    /// No bearer token, or one the API server does not accept: 401.
    Unauthenticated,
    /// A known user without the right: 403.
    Forbidden,
}

/// How long a verdict is reused for the same token (a scraper sends the same one
/// every interval).
const CACHE_TTL: Duration = Duration::from_secs(30);
/// Verdicts kept at most; the cache is emptied when it is full.
const CACHE_ENTRIES: usize = 1024;

/// Asks the API server about tokens, remembering recent answers by the token's hash
/// (tokens themselves are never kept, logged or compared in the clear).
pub struct Authorizer {
    client: kube::Client,
    path: String,
    recent: Mutex<HashMap<[u8; 32], (Verdict, Instant)>>,
}

impl Authorizer {
    pub fn new(client: kube::Client, path: &str) -> Self {
        Self {
            client,
            path: path.to_owned(),
            recent: Mutex::new(HashMap::new()),
        }
    }

    /// The verdict for a request with this `Authorization` header value.
    pub async fn check(&self, authorization: Option<&str>) -> Verdict {
        let Some(token) = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
        else {
            return Verdict::Unauthenticated;
        };
        let key = digest(token);
        if let Some(verdict) = self.remembered(&key) {
            return verdict;
        }
        let verdict = match self.review(token).await {
            Ok(verdict) => verdict,
            Err(e) => {
                // Not cached: the next scrape asks again.
                tracing::warn!(error = %e, "cannot review a /metrics token with the API server");
                return Verdict::Unauthenticated;
            }
        };
        self.remember(key, verdict);
        verdict
    }

    async fn review(&self, token: &str) -> Result<Verdict, kube::Error> {
        let Some(user) = self.authenticate(token).await? else {
            return Ok(Verdict::Unauthenticated);
        };
        Ok(if self.authorize(user).await? {
            Verdict::Allowed
        } else {
            Verdict::Forbidden
        })
    }

    async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = answer.status.unwrap_or_default();
        Ok(status
            .authenticated
            .unwrap_or(false)
            .then_some(status.user)
            .flatten())
    }

    async fn authorize(&self, user: UserInfo) -> Result<bool, kube::Error> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(self.path.clone()),
                    verb: Some("get".into()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }

    fn remembered(&self, key: &[u8; 32]) -> Option<Verdict> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent
            .get(key)
            .filter(|(_, at)| at.elapsed() < CACHE_TTL)
            .map(|(verdict, _)| *verdict)
    }

    fn remember(&self, key: [u8; 32], verdict: Verdict) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() >= CACHE_ENTRIES {
            recent.clear();
        }
        recent.insert(key, (verdict, Instant::now()));
    }
}

fn digest(token: &str) -> [u8; 32] {
    let hash = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut key = [0; 32];
    key.copy_from_slice(hash.as_ref());
    key
}
