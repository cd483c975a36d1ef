//! Which store an example runs on, from the environment: shared by the
//! examples that run on Redis, on PostgreSQL or in memory.

/// Where the locks and the example's data are.
pub enum Store {
    Memory,
    Redis(String),
    #[cfg(feature = "postgres")]
    Postgres(String),
}

impl Store {
    /// `REDIS_URL`, else `DATABASE_URL`, else memory. With `announce`, says
    /// which when both are set, or when `DATABASE_URL` cannot be used.
    pub fn from_env(announce: bool) -> Store {
        let var = |name| {
            std::env::var(name)
                .ok()
                .filter(|url: &String| !url.is_empty())
        };
        match (var("REDIS_URL"), var("DATABASE_URL")) {
            (Some(url), database) => {
                if database.is_some() && announce {
                    println!("REDIS_URL and DATABASE_URL are both set: using Redis (REDIS_URL).");
                }
                Store::Redis(url)
            }
            #[cfg(feature = "postgres")]
            (None, Some(url)) => Store::Postgres(url),
            #[cfg(not(feature = "postgres"))]
            (None, Some(_)) => {
                if announce {
                    println!(
                        "DATABASE_URL is set, but this build has no PostgreSQL: \
                         run with `--features postgres` to use it."
                    );
                }
                Store::Memory
            }
            (None, None) => Store::Memory,
        }
    }
}
