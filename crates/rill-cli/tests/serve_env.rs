//! `rill serve` configured from the environment only, as a container runs
//! it: the `RILL_*` variables take the place of the flags.

mod common;

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// GET `path` on loopback `port`, with a bearer `key`: (status, body).
fn get(port: u16, path: &str, key: Option<&str>) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let auth = key.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://app.example\r\n{auth}Connection: close\r\n\r\n"
    )?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)?;
    let status = reply
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, reply))
}

fn body_json(reply: &str) -> Value {
    let body = reply.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {reply}"))
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn serve_takes_every_setting_from_rill_variables() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let port_text = port.to_string();
    let model = common::fixture("qwen35moe.f32.gguf");
    let vars: &[(&str, &str)] = &[
        ("RILL_MODEL", &model),
        ("RILL_PORT", &port_text),
        ("RILL_ALIAS", "from-env"),
        ("RILL_PARALLEL", "3"),
        ("RILL_CTX_SIZE", "640"),
        ("RILL_API_KEY", "sk-env"),
        ("RILL_TEMP", "0.25"),
        ("RILL_TOP_K", "7"),
        ("RILL_CORS_ORIGINS", "http://app.example"),
        ("RILL_NO_WEBUI", "true"),
        ("RILL_THREADS", "1"),
    ];
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rill"));
    cmd.arg("serve").stdout(Stdio::null()).stderr(Stdio::null());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let mut server = Server(cmd.spawn().expect("start rill serve"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((200, _)) = get(port, "/health", None) {
            break;
        }
        assert!(server.0.try_wait().unwrap().is_none(), "rill serve exited");
        assert!(Instant::now() < deadline, "rill serve did not start");
        std::thread::sleep(Duration::from_millis(200));
    }
    // RILL_API_KEY guards the API.
    assert_eq!(get(port, "/props", None).unwrap().0, 401);
    let (status, reply) = get(port, "/props", Some("sk-env")).unwrap();
    assert_eq!(status, 200, "{reply}");
    // RILL_CORS_ORIGINS lets that origin in.
    assert!(
        reply
            .to_ascii_lowercase()
            .contains("access-control-allow-origin: http://app.example"),
        "{reply}"
    );
    let props = body_json(&reply);
    assert_eq!(props["model_alias"], "from-env");
    assert_eq!(props["total_slots"], 3);
    let params = &props["default_generation_settings"]["params"];
    assert_eq!(params["n_ctx"], 640);
    assert_eq!(params["temperature"], 0.25);
    assert_eq!(params["top_k"], 7);
    let (_, reply) = get(port, "/v1/models", Some("sk-env")).unwrap();
    assert_eq!(body_json(&reply)["data"][0]["id"], "from-env");
    // RILL_NO_WEBUI: no chat page at `/`.
    assert_eq!(get(port, "/", None).unwrap().0, 404);
}
