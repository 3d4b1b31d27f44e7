//! A silent loss on an interface (`bpf/loss.bpf.c`), for `intscope lab`'s `silent-drop` fault: a
//! share of the packets arriving on it vanish without a drop the kernel reports, as frames a bad
//! cable corrupts die in the receiving NIC before any switch or host-INT agent sees them.
//!
//! The program hangs off the interface's clsact qdisc as a classic cls_bpf filter and steals the
//! packets it loses (`TC_ACT_STOLEN`: freed by `consume_skb`, which `skb:kfree_skb` never sees);
//! it stays attached while the [`SilentLoss`] lives.

use aya::programs::SchedClassifier;
use aya::programs::tc::{self, NlOptions, TcAttachOptions, TcAttachType};
use aya::{Btf, Ebpf, EbpfLoader};

use crate::AgentError;
use crate::bpf::{load_error, read_counters};

/// The compiled object (empty when the build had no BPF toolchain).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/loss.bpf.o"));

/// Why the build made no object, if it did not.
const NOT_BUILT: Option<&str> = option_env!("INTSCOPE_AGENT_NO_BPF_WHY");

/// A loss attached to one interface: detached when dropped.
pub struct SilentLoss {
    ebpf: Ebpf,
}

impl SilentLoss {
    /// Loses `share` (0 < share ≤ 1) of the packets arriving on `iface`, an interface of this
    /// thread's network namespace.
    pub fn attach(iface: &str, share: f64) -> Result<SilentLoss, AgentError> {
        if OBJECT.is_empty() {
            return Err(AgentError::NotBuilt(
                NOT_BUILT
                    .unwrap_or("the build made no BPF object")
                    .to_string(),
            ));
        }
        if !(share > 0.0 && share <= 1.0) {
            return Err(AgentError::Config(format!(
                "a silent loss of {share}: a share above 0 and at most 1"
            )));
        }
        let lose_all = u32::from(share >= 1.0);
        // Below 1 the share fits 32 bits: a draw below share × 2^32 is lost.
        let threshold = (share * 4_294_967_296.0).min(f64::from(u32::MAX)) as u32;
        let btf = Btf::from_sys_fs().map_err(|e| {
            AgentError::Bpf(format!(
                "the kernel's BTF (/sys/kernel/btf/vmlinux) cannot be read: {e}"
            ))
        })?;
        let mut ebpf = EbpfLoader::new()
            .btf(Some(&btf))
            .override_global("threshold", &threshold, true)
            .override_global("lose_all", &lose_all, true)
            .load(OBJECT)
            .map_err(|e| load_error("loading the silent loss's object", e))?;
        // A classic filter needs the clsact qdisc; one already there is fine.
        let _ = tc::qdisc_add_clsact(iface);
        let p: &mut SchedClassifier = ebpf
            .program_mut("lose")
            .ok_or_else(|| AgentError::Bpf("program lose missing".into()))?
            .try_into()
            .map_err(|e| load_error("lose", e))?;
        p.load().map_err(|e| load_error("loading lose", e))?;
        p.attach_with_options(
            iface,
            TcAttachType::Ingress,
            TcAttachOptions::Netlink(NlOptions::default()),
        )
        .map_err(|e| load_error(&format!("attaching lose at tc ingress of {iface}"), e))?;
        Ok(SilentLoss { ebpf })
    }

    /// Packets seen and packets lost so far.
    pub fn counts(&self) -> Result<(u64, u64), AgentError> {
        let [seen, lost] = read_counters::<2>(&self.ebpf)?;
        Ok((seen, lost))
    }
}
