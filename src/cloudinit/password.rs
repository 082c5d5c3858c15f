//! The deploy user's password as a SHA-512 crypt hash (`$6$rounds=N$salt$hash`, what
//! `chpasswd -e` and cloud-init's `hashed_passwd` take), never in plain text (seed 000 §9
//! "deploy user/pass"). The hash sits in the user_data MAAS keeps (readable to MAAS users), so
//! it must resist offline guessing: [`CRYPT_ROUNDS`] rounds, not crypt's default 5,000.
//!
//! The salt is derived from the node's identity rather than drawn at random, so one node's
//! payload is identical byte for byte across renders while two nodes sharing a site password
//! still get different hashes.

use sha2::{Digest, Sha256};

use super::CloudInitInput;
use crate::secrets::Secret;

/// crypt(3)'s base64 alphabet.
const CRYPT_ALPHABET: &[u8] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// SHA-crypt uses at most 16 salt characters.
const SALT_LEN: usize = 16;

/// A 16-character salt from the node's hostname, system id and user name.
pub fn salt_for(input: &CloudInitInput) -> String {
    let digest = Sha256::new()
        .chain_update(b"metalform deploy-user salt v1\0")
        .chain_update(input.hostname.as_bytes())
        .chain_update(b"\0")
        .chain_update(input.system_id.as_bytes())
        .chain_update(b"\0")
        .chain_update(input.deploy_user.name.as_bytes())
        .finalize();
    digest[..SALT_LEN]
        .iter()
        .map(|b| CRYPT_ALPHABET[usize::from(b & 0x3f)] as char)
        .collect()
}

/// SHA-512 crypt rounds of the deploy user's hash: passlib's default for sha512_crypt, about
/// 130 times the cost of crypt's default of 5,000 for each guess.
pub const CRYPT_ROUNDS: usize = 656_000;

/// `$6$rounds=656000$<salt>$<hash>`. The hash is itself sensitive (it can be attacked
/// offline), so it travels as a [`Secret`].
pub fn sha512_crypt(password: &Secret, salt: &str) -> Secret {
    sha512_crypt_rounds(password, salt, CRYPT_ROUNDS)
}

fn sha512_crypt_rounds(password: &Secret, salt: &str, rounds: usize) -> Secret {
    let params = sha_crypt::Sha512Params::new(rounds).expect("rounds within crypt's bounds");
    let hash = sha_crypt::sha512_crypt_b64(password.expose().as_bytes(), salt.as_bytes(), &params)
        .expect("SHA-512 crypt with valid rounds cannot fail");
    Secret::new(format!("$6$rounds={rounds}${salt}${hash}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_vectors_of_the_sha_crypt_specification() {
        // Ulrich Drepper's "Unix crypt using SHA-256 and SHA-512", test vector 2 (10,000
        // rounds, the salt cut to 16 characters).
        assert_eq!(
            sha512_crypt_rounds(&Secret::new("Hello world!"), "saltstringsaltst", 10_000).expose(),
            "$6$rounds=10000$saltstringsaltst$OW1/O6BYHV6BcXZu8QVeXbDWra3Oeqh0sbHbbMCVNSnCM/UrjmM0Dp8vOuZeHBy/YTBmSK6H9qs/y3RnOaw5v."
        );
    }

    #[test]
    fn the_deploy_hash_uses_the_high_round_count_and_verifies() {
        let hash = sha512_crypt(&Secret::new("correct horse"), "abcdefghijklmnop");
        assert!(
            hash.expose()
                .starts_with("$6$rounds=656000$abcdefghijklmnop$")
        );
        let again = |password: &str| {
            sha512_crypt_rounds(&Secret::new(password), "abcdefghijklmnop", CRYPT_ROUNDS)
        };
        assert_eq!(again("correct horse").expose(), hash.expose());
        assert_ne!(again("wrong horse").expose(), hash.expose());
    }

    #[test]
    fn salts_use_the_crypt_alphabet_and_differ_per_node() {
        let mut a = crate::cloudinit::tests::input();
        let salt_a = salt_for(&a);
        assert_eq!(salt_a.len(), SALT_LEN);
        assert!(salt_a.bytes().all(|b| CRYPT_ALPHABET.contains(&b)));
        assert_eq!(salt_for(&a), salt_a, "deterministic");
        a.hostname = "c07u44".into();
        assert_ne!(salt_for(&a), salt_a);
    }
}
