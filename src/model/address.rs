//! Network values of the manifests: MAC addresses (`pxeMac`, seed 000 §3.2.1 overrides) and
//! IPv4 interface addresses with a prefix (RoCE assignments, seed 000 §3.3 `ipv4_cidr`).

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A 48-bit MAC address, written `aa:bb:cc:dd:ee:ff` (dashes accepted on input), shown lowercase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MacAddr([u8; 6]);

impl MacAddr {
    pub fn octets(&self) -> [u8; 6] {
        self.0
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a MAC address: expected six hex pairs such as 3c:ec:ef:12:34:56")]
pub struct MacAddrError(String);

impl FromStr for MacAddr {
    type Err = MacAddrError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = || MacAddrError(text.to_string());
        let separator = if text.contains('-') { '-' } else { ':' };
        let mut octets = [0u8; 6];
        let mut parts = text.split(separator);
        for octet in &mut octets {
            let part = parts.next().ok_or_else(err)?;
            if part.len() != 2 {
                return Err(err());
            }
            *octet = u8::from_str_radix(part, 16).map_err(|_| err())?;
        }
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(MacAddr(octets))
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl Serialize for MacAddr {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        from_text(deserializer)
    }
}

/// Read a value from its text form (plan files carry model values as they print).
fn from_text<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
{
    let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
    text.parse().map_err(serde::de::Error::custom)
}

/// An IPv4 address on an interface together with its prefix length, e.g. `172.30.9.61/31`.
/// Host bits may be set: that is the point of an interface address (a /31 point-to-point link
/// names one of its two ends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InterfaceAddr {
    pub address: Ipv4Addr,
    pub prefix_len: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterfaceAddrError {
    #[error("`{0}` is not an IPv4 address with a prefix such as 172.30.9.61/31")]
    Malformed(String),
    #[error("`{0}` has prefix length {1}: an IPv4 prefix is 0–32")]
    PrefixTooLong(String, u32),
}

impl InterfaceAddr {
    /// The network this address belongs to (`172.30.9.60/31` for `172.30.9.61/31`).
    pub fn network(&self) -> InterfaceAddr {
        let mask = if self.prefix_len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix_len))
        };
        InterfaceAddr {
            address: Ipv4Addr::from(u32::from(self.address) & mask),
            prefix_len: self.prefix_len,
        }
    }
}

impl FromStr for InterfaceAddr {
    type Err = InterfaceAddrError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let malformed = || InterfaceAddrError::Malformed(text.to_string());
        let (address, prefix) = text.split_once('/').ok_or_else(malformed)?;
        let address: Ipv4Addr = address.parse().map_err(|_| malformed())?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) || prefix.len() > 3 {
            return Err(malformed());
        }
        let prefix_len: u32 = prefix.parse().map_err(|_| malformed())?;
        let prefix_len = u8::try_from(prefix_len)
            .ok()
            .filter(|p| *p <= 32)
            .ok_or_else(|| InterfaceAddrError::PrefixTooLong(text.to_string(), prefix_len))?;
        Ok(InterfaceAddr {
            address,
            prefix_len,
        })
    }
}

impl fmt::Display for InterfaceAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

impl Serialize for InterfaceAddr {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for InterfaceAddr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        from_text(deserializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_addresses_parse_and_normalise() {
        let mac: MacAddr = "3C:EC:EF:12:34:5A".parse().unwrap();
        assert_eq!(mac.to_string(), "3c:ec:ef:12:34:5a");
        assert_eq!(
            serde_json::from_value::<MacAddr>(serde_json::json!("3c:ec:ef:12:34:5a")).unwrap(),
            mac
        );
        assert!(serde_json::from_value::<MacAddr>(serde_json::json!("3c:ec")).is_err());
        assert_eq!("3c-ec-ef-12-34-5a".parse::<MacAddr>().unwrap(), mac);
        for bad in [
            "3c:ec:ef:12:34",
            "3c:ec:ef:12:34:5a:00",
            "3c:ec:ef:12:34:zz",
            "3cec.ef12.345a",
            "",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn interface_addresses_keep_host_bits() {
        let addr: InterfaceAddr = "172.30.9.61/31".parse().unwrap();
        assert_eq!(addr.to_string(), "172.30.9.61/31");
        assert_eq!(addr.network().to_string(), "172.30.9.60/31");
        assert_eq!(
            serde_json::from_value::<InterfaceAddr>(serde_json::to_value(addr).unwrap()).unwrap(),
            addr
        );
        assert_eq!(
            "10.0.0.1/33"
                .parse::<InterfaceAddr>()
                .unwrap_err()
                .to_string(),
            "`10.0.0.1/33` has prefix length 33: an IPv4 prefix is 0–32"
        );
        for bad in [
            "172.30.9.61",
            "172.30.9.61/",
            "172.30.9/31",
            "a/31",
            "1.2.3.4/+1",
            "1.2.3.4/x",
        ] {
            assert!(bad.parse::<InterfaceAddr>().is_err(), "{bad}");
        }
    }
}
