//! The record of the scripts the models were checked against: each script of
//! `lockmacro-runtime/src/backend/scripts/` with the SHA-256 of its contents
//! and the models that mirror it. The test `scripts_match_the_record` fails
//! when a script changes (or one is added) until the model is reviewed
//! against it and the hash here updated.

/// One script as the models know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Script {
    /// Its file name under `lockmacro-runtime/src/backend/scripts/`.
    pub name: &'static str,
    /// The SHA-256 of its contents, in lowercase hex, when last reviewed.
    pub sha256: &'static str,
    /// The models with transitions that mirror it; empty when none does
    /// (and why, in `docs/model.md`).
    pub models: &'static [&'static str],
}

/// Every script, as last reviewed against the models.
///
/// ```
/// let acquire = lockmacro_model::SCRIPTS.iter().find(|s| s.name == "acquire.lua");
/// assert!(acquire.is_some_and(|s| s.models.contains(&"Plain")));
/// ```
pub const SCRIPTS: &[Script] = &[
    script(
        "acquire.lua",
        "b7a101a08820a88fd5ba1b31390f8aa27e5a66574191c12684bc5eb97974fccf",
        &["Plain", "Fences", "Kinds", "Scriptless"],
    ),
    script(
        "acquire_fair.lua",
        "08b849d0aff52b198fa09a74ad3e3a78e18133d5fd4ac52b16a90241d473db76",
        &["Fair"],
    ),
    script(
        "acquire_shared.lua",
        "2c469fa36531d4ae13247ed07b3c3a216240389716648c0b1f042c2323e5c3e9",
        &["Shares", "Kinds", "Scriptless"],
    ),
    script(
        "confirm.lua",
        "3ba1c6249752c49213c9b46d22895f17a68db6cc0270b4faa7b985f6030ba618",
        &["Fair"],
    ),
    script(
        "downgrade.lua",
        "5bab44f7cb0096c693c7668ce1c78dd54d985f0bbcd426c8f2c1873dab6e0d82",
        &["Kinds"],
    ),
    script(
        "fence.lua",
        "b472d143819ef50f01bee3a3a964816d44468ed67dae788394798fde6645b672",
        &["Fences"],
    ),
    script(
        "fenced_set.lua",
        "fd5b6d1ce2d678f52d6a8562b30310be83445c039d353e34db2641248ad48835",
        &[],
    ),
    script(
        "force_release.lua",
        "8a865b89244244086266c019d9a13ebfaa5d7e581b0f5716ec3276bb80fa39a9",
        &["Kinds"],
    ),
    script(
        "grant.lua",
        "2e48ac9528dd7244fc917f76555fde453b354cd5398cb5ee32da533a2d19e2c9",
        &["Fair"],
    ),
    script(
        "holders.lua",
        "e597dd99d1d44684f4b3ff1346a5afb4bad69d5d0336280bd4dbdaad1f14ee7e",
        &[],
    ),
    script(
        "inspect.lua",
        "b9e07eddcb6f612e072dd7aeb684c11509af98f60ba5ce552cb1a42440437195",
        &[],
    ),
    script(
        "kinds.lua",
        "4e3d4de85aa226f6d7836256955a3e17db4cd863936d4d6231f5385c8293f88a",
        &["Kinds", "Scriptless"],
    ),
    script(
        "leases.lua",
        "a1acd4462a325a6b2dffebb9d6bdf768b155f7fb80729c30dcca3417264d4b11",
        &[
            "Plain",
            "Fair",
            "Shares",
            "Kinds",
            "Refreshes",
            "Scriptless",
        ],
    ),
    script(
        "mark.lua",
        "1817105082fe3da6a0d22646f4afddf87f4dfd730226ce19fde0f95020694e4f",
        &["Plain", "Fair"],
    ),
    script(
        "raise_fence.lua",
        "5fb682ed66339c9e0d8d8e841690782fc0856b2ef27c77238425338577258660",
        &[],
    ),
    script(
        "refresh.lua",
        "134406dd091a520bc18c131e501cde8c3e95d77320a0787e7495946edd21d72f",
        &[
            "Plain",
            "Fair",
            "Shares",
            "Kinds",
            "Refreshes",
            "Scriptless",
        ],
    ),
    script(
        "refresh_many.lua",
        "f7b1a5a628617020c881c40485e4c5fab234e64d80535d02d4bee380b5446858",
        &["Plain"],
    ),
    script(
        "release.lua",
        "29a440db1377130377131966553bd75537af4bdfa1c0da1dccb0b53da1949cbd",
        &["Plain", "Fair", "Shares", "Fences", "Kinds", "Scriptless"],
    ),
    script(
        "release_announce.lua",
        "ec3335e38917f435ea930ef644be40022f192d23c4d11645245a9b9294c7bdcf",
        &["Plain", "Fair"],
    ),
    script(
        "release_plain.lua",
        "3be661c66eaf06358cfc14db77f8acc6aa596d57b6ba225b2d6fa1ecdbdf8170",
        &["Plain"],
    ),
    script(
        "remaining.lua",
        "11ec6d5089dadc876a2936e4e42478ca62b03266e02d328077292bbad9e55bae",
        &[],
    ),
    script(
        "waiters.lua",
        "cfb28fb2e23c533aedf2a4aad104b216bfe3d5adcf2d28913c7fc41616aa9e95",
        &["Plain", "Fair"],
    ),
];

const fn script(
    name: &'static str,
    sha256: &'static str,
    models: &'static [&'static str],
) -> Script {
    Script {
        name,
        sha256,
        models,
    }
}
