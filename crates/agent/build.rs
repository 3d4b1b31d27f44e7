//! Compiles `bpf/agent.bpf.c` (INT-XD postcards), `bpf/int.bpf.c` (the INT-MD/MX data path) and
//! `bpf/loss.bpf.c` (the lab's silent loss) with clang into the objects the agent embeds (CO-RE, against a
//! `vmlinux.h` dumped by bpftool from this machine's kernel BTF; the object relocates to the
//! running kernel's layout when it loads). Without clang, bpftool or kernel BTF the crate still
//! builds: the agent then refuses to start and says what the build lacked.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=bpf/agent.bpf.c");
    println!("cargo:rerun-if-changed=bpf/int.bpf.c");
    println!("cargo:rerun-if-changed=bpf/loss.bpf.c");
    println!("cargo:rerun-if-changed=bpf/flow_filter.h");
    println!("cargo:rerun-if-env-changed=INTSCOPE_AGENT_NO_BPF");
    println!("cargo:rerun-if-env-changed=INTSCOPE_AGENT_REQUIRE_BPF");
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rustc-check-cfg=cfg(intscope_bpf)");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let object = out.join("agent.bpf.o");
    let built = build(&out, &object, "agent")
        .and_then(|()| build(&out, &out.join("int.bpf.o"), "int"))
        .and_then(|()| build(&out, &out.join("loss.bpf.o"), "loss"));
    match built {
        Ok(()) => println!("cargo:rustc-cfg=intscope_bpf"),
        Err(why) if std::env::var_os("INTSCOPE_AGENT_REQUIRE_BPF").is_some() => {
            panic!("INTSCOPE_AGENT_REQUIRE_BPF is set and the BPF programs were not built: {why}")
        }
        Err(why) => {
            println!("cargo:warning=intscope-agent: BPF programs not built: {why}");
            println!("cargo:rustc-env=INTSCOPE_AGENT_NO_BPF_WHY={why}");
            std::fs::write(&object, []).expect("write the empty object");
            for name in ["int", "loss"] {
                std::fs::write(out.join(format!("{name}.bpf.o")), [])
                    .expect("write the empty object");
            }
        }
    }
}

/// Compiles `bpf/<name>.bpf.c` into `object`.
fn build(out: &Path, object: &Path, name: &str) -> Result<(), String> {
    if std::env::var_os("INTSCOPE_AGENT_NO_BPF").is_some() {
        return Err("INTSCOPE_AGENT_NO_BPF was set".into());
    }
    let btf = Path::new("/sys/kernel/btf/vmlinux");
    if !btf.exists() {
        return Err("the build machine's kernel has no BTF (/sys/kernel/btf/vmlinux)".into());
    }
    let header = Command::new("bpftool")
        .args(["btf", "dump", "file"])
        .arg(btf)
        .args(["format", "c"])
        .output()
        .map_err(|e| format!("bpftool not found ({e}): apt-get install bpftool"))?;
    if !header.status.success() {
        return Err(format!(
            "bpftool btf dump failed: {}",
            String::from_utf8_lossy(&header.stderr).trim()
        ));
    }
    std::fs::write(out.join("vmlinux.h"), &header.stdout).map_err(|e| e.to_string())?;
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86",
        Ok("aarch64") => "arm64",
        Ok(other) => return Err(format!("no BPF target macros for {other}")),
        Err(e) => return Err(e.to_string()),
    };
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf"])
        .arg(format!("-D__TARGET_ARCH_{arch}"))
        .arg("-I")
        .arg(out)
        .arg("-c")
        .arg(format!("bpf/{name}.bpf.c"))
        .arg("-o")
        .arg(object)
        .status()
        .map_err(|e| format!("{clang} not found ({e}): apt-get install clang libbpf-dev"))?;
    if !status.success() {
        return Err(format!(
            "{clang} failed to compile bpf/{name}.bpf.c ({status})"
        ));
    }
    Ok(())
}
