//! Where the server can be reached, for the startup log.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The address a browser or client on this machine should use: the bound one,
/// or loopback when the server listens on every interface.
pub fn reachable(local: SocketAddr) -> SocketAddr {
    let ip = match local.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, local.port())
}

/// Lines naming the chat page (when it is on) and the OpenAI base URL.
pub fn describe(local: SocketAddr, webui: bool) -> Vec<String> {
    let base = format!("http://{}", reachable(local));
    let mut lines = Vec::new();
    if webui {
        lines.push(format!("chat page: {base}/"));
    } else {
        lines.push("chat page: off (--no-webui)".to_string());
    }
    lines.push(format!("OpenAI API base URL: {base}/v1"));
    if local.ip().is_unspecified() {
        lines.push(format!(
            "listening on every interface ({local}): other machines use this host's address"
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn urls() {
        let l = describe("127.0.0.1:8080".parse().unwrap(), true);
        assert_eq!(
            l,
            [
                "chat page: http://127.0.0.1:8080/",
                "OpenAI API base URL: http://127.0.0.1:8080/v1"
            ]
        );
        let l = describe("0.0.0.0:9000".parse().unwrap(), false);
        assert_eq!(l[0], "chat page: off (--no-webui)");
        assert_eq!(l[1], "OpenAI API base URL: http://127.0.0.1:9000/v1");
        assert_eq!(l.len(), 3);
        let l = describe("[::]:80".parse().unwrap(), true);
        assert_eq!(l[0], "chat page: http://[::1]:80/");
    }
}
