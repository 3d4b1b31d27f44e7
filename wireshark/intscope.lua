-- intscope.lua: Wireshark / tshark dissector for In-band Network Telemetry (INT) and telemetry
-- reports, from the intscope project (https://github.com/intscope). Works with Wireshark >= 3.6.
--
-- Decodes what `intscope dump` decodes, with the same specs (quoted per function below):
--   * INT v2.1 INT-MD / INT-MX / destination headers, over TCP/UDP (DSCP, INT UDP port, probe
--     marker, new UDP header), VXLAN-GPE, Geneve and GRE, in IPv4 and IPv6;
--   * INT v1.0 and v0.5 (shim, metadata header, v0.5 tail), and the 2016 format over VXLAN-GPE;
--   * Telemetry Report v2.0 (group header, coalesced individual reports, RepMdBits, TLVs), v1.0
--     and v0.5, the inner packet handed back to Wireshark's Ethernet / IP dissectors.
--
-- Install: `intscope wireshark install`, or `tshark -X lua_script:intscope.lua`.
-- Display filter fields: `int.*` and `intrep.*` (docs/wireshark.md lists them all).
--
-- Codepoints the specs leave open are preferences (Edit > Preferences > Protocols > INT / INTREP,
-- or `-o int.udp_ports:17768`), with `intscope dump`'s defaults: no INT UDP port, DSCP 0x17/0x3f,
-- no probe marker, no GRE protocol type, reports on UDP 32766.
--
-- DSCP- or probe-marked INT after TCP/UDP is found by a heuristic dissector: when the marked
-- traffic's port has a dissector of its own (HTTP on 80...), enable "Try heuristic
-- sub-dissectors first" for TCP/UDP (`-o tcp.try_heuristic_first:TRUE`), or that dissector
-- gets the bytes first.

local INTSCOPE_LUA_VERSION = "0.1.0"

local B = bit32 or bit -- Lua 5.2 (Wireshark 3.6/4.0) has bit32; later builds bundle "bit".
local band, bor, rshift, bnot = B.band, B.bor, B.rshift, B.bnot

-- Loaded twice in one Wireshark (installed as a plugin by `intscope wireshark install` and given
-- again with `-X lua_script:`), the second copy's Proto("int") fails ("there cannot be two
-- protocols with the same description") and tshark prints a Lua error on every run. The first
-- copy loaded stays and decodes; the second steps aside quietly.
local proto_ok, p_int = pcall(Proto, "int", "In-band Network Telemetry")
if not proto_ok then
    if tostring(p_int):find("two protocols", 1, true) then
        return
    end
    error(p_int)
end
local p_rep = Proto("intrep", "INT Telemetry Report")

---------------------------------------------------------------------------------------------
-- Preferences (shared/spec/README.md "Values the specs leave open")
---------------------------------------------------------------------------------------------

p_int.prefs.udp_ports = Pref.range("INT UDP ports",
    "", "UDP destination ports that signal INT after the UDP header (INT_TBD; --int-udp-port)", 65535)
p_int.prefs.dscp = Pref.string("INT DSCP value[/mask]", "0x17",
    "DSCP value and mask marking INT after TCP/UDP, e.g. 0x17 or 0x20/0x20; none disables (--int-dscp)")
p_int.prefs.probe_marker = Pref.string("Probe marker (64-bit hex)", "",
    "64-bit probe marker before the shim, empty: none (--probe-marker)")
p_int.prefs.gre_proto = Pref.string("GRE protocol type of INT", "",
    "GRE protocol type (TBD_INT) meaning an INT shim follows, e.g. 0x4569; empty: none (--int-gre-proto)")
p_int.prefs.gpe_next_proto = Pref.uint("VXLAN-GPE next protocol of INT", 0x82,
    "VXLAN-GPE next protocol of an INT v2.1 header (INT v2.1 uses 0x82, not yet IANA-reserved)", 16)
p_int.prefs.gpe_next_proto_2016 = Pref.uint("VXLAN-GPE next protocol of 2016 INT", 0x05,
    "VXLAN-GPE next protocol of a 2016-format INT header (INT spec 2016 section 5.3.2: 0x05); 0 disables", 16)
p_int.prefs.geneve_class = Pref.uint("Geneve option class of INT", 0x0103,
    "Geneve option class of INT options (INT v2.1 section INT over Geneve: 0x0103)", 16)
p_int.prefs.domains = Pref.string("Domain registry (TOML)", "",
    "Domain-specific metadata registry in intscope's domains.toml format (--domains)")
p_int.prefs.unmarked = Pref.bool("Unmarked INT", false,
    "Also read INT after TCP/UDP without any marking, where every reserved field is zero and the lengths "
    .. "agree (--unmarked-int); a report's packet is read so when its F bit is set, whatever this says. "
    .. "Off: any payload can look like INT")

p_int.prefs.about = Pref.statictext("intscope.lua " .. INTSCOPE_LUA_VERSION
    .. ": INT and telemetry reports, as `intscope dump` decodes them (docs/wireshark.md)")

p_rep.prefs.udp_ports = Pref.range("Report UDP ports", "32766",
    "UDP destination ports of telemetry reports (--report-port; SD-Fabric's collector port 32766)", 65535)

---------------------------------------------------------------------------------------------
-- Fields
---------------------------------------------------------------------------------------------

local F = {}
local function fld(key, ctor, abbr, name, ...)
    F[key] = ctor(abbr, name, ...)
    return F[key]
end

local int_types = { [1] = "INT-MD", [2] = "Destination", [3] = "INT-MX" }
local npt_names = { [0] = "DSCP/probe (original DSCP)", [1] = "UDP port (original port)",
    [2] = "new UDP header (original IP protocol)", [3] = "reserved" }

-- SD-Fabric / fabric-tna drop reasons (stratum/fabric-tna p4src/shared/define.p4,
-- IntDropReason_t; shared/spec/sd-fabric-int.txt).
local drop_reasons = {
    [0] = "unknown", [26] = "ip-ttl-zero", [29] = "routing-miss", [55] = "port-vlan-mapping-miss",
    [71] = "traffic-manager", [80] = "acl-deny", [89] = "bridging-miss", [128] = "next-id-miss",
    [129] = "mpls-miss", [130] = "egress-next-miss", [131] = "mpls-ttl-zero",
    [132] = "downlink-pdr-miss", [133] = "uplink-pdr-miss", [134] = "far-miss",
    [150] = "spgw-uplink-recirc-deny", [160] = "ingress-qos-meter",
}
-- p4lang/switch drop_reason_codes.h, the table Report v2.0 points to: the fallback for codes
-- SD-Fabric does not name, as dump reads them (crates/wire/src/drop_reason.rs).
local p4lang_switch_drop_reasons = {
    [0] = "unknown", [10] = "outer-src-mac-zero", [11] = "outer-src-mac-multicast",
    [12] = "outer-dst-mac-zero", [13] = "outer-ethernet-miss", [14] = "src-mac-zero",
    [15] = "src-mac-multicast", [16] = "dst-mac-zero", [25] = "outer-ip-version-invalid",
    [26] = "outer-ip-ttl-zero", [27] = "outer-ip-src-multicast", [28] = "outer-ip-src-loopback",
    [29] = "outer-ip-miss", [30] = "outer-ip-ihl-invalid", [40] = "ip-version-invalid",
    [41] = "ip-ttl-zero", [42] = "ip-src-multicast", [43] = "ip-src-loopback", [44] = "ip-ihl-invalid",
    [55] = "port-vlan-mapping-miss", [56] = "stp-check-fail-ingress", [57] = "stp-check-fail-egress",
    [58] = "same-ifindex", [59] = "multicast-snooping-enabled", [70] = "mtu-check-fail",
    [71] = "traffic-manager", [72] = "meter", [73] = "wred", [80] = "acl-deny", [81] = "racl-deny",
    [82] = "urpf-check-fail", [83] = "ipsg-miss", [84] = "ifindex", [85] = "cpu-color-yellow",
    [86] = "cpu-color-red", [87] = "storm-control-color-yellow", [88] = "storm-control-color-red",
    [89] = "l2-miss-unicast", [90] = "l2-miss-multicast", [91] = "l2-miss-broadcast",
    [92] = "egress-acl-deny", [93] = "nhop", [94] = "rmac-hit-non-ip", [95] = "mlag", [96] = "ttl4",
    [97] = "same-port-check", [98] = "pfc-tc-drop", [100] = "csum-error", [101] = "parser-error",
    [254] = "others-ingress", [255] = "others-egress",
}
-- intscope's host agent: drops the Linux kernel makes that neither table names.
for code, name in pairs({
    [192] = "kernel-malformed", [193] = "kernel-socket", [194] = "kernel-address",
    [195] = "kernel-resources", [196] = "kernel-device", [197] = "kernel-fragment",
    [198] = "kernel-tunnel", [199] = "kernel-unspecified", [200] = "kernel-other",
}) do
    p4lang_switch_drop_reasons[code] = name
end
for code, name in pairs(p4lang_switch_drop_reasons) do
    if drop_reasons[code] == nil then drop_reasons[code] = name end
end
local rep_types = { [0] = "Inner Only", [1] = "INT", [2] = "IOAM" }
local in_types = { [0] = "None", [1] = "TLV", [2] = "Domain-specific extension", [3] = "Ethernet",
    [4] = "IPv4", [5] = "IPv6" }
local tlv_types = { [0] = "Domain-specific extension", [1] = "Ethernet", [2] = "IPv4", [3] = "IPv6" }

-- INT block
fld("encap", ProtoField.string, "int.encap", "Encapsulation")
fld("type", ProtoField.uint8, "int.type", "INT type", base.DEC, int_types)
fld("version", ProtoField.uint8, "int.version", "INT version (2: v2.x, 1: v1.0, 0: v0.5 / 2016)")
fld("spec", ProtoField.string, "int.spec", "Specification")
fld("offset", ProtoField.uint32, "int.offset", "Offset of the shim in the packet")
fld("shim", ProtoField.bytes, "int.shim", "Shim header")
fld("shim_type", ProtoField.uint8, "int.shim.type", "Type", base.DEC, int_types)
fld("shim_npt", ProtoField.uint8, "int.shim.npt", "Next Protocol Type (NPT)", base.DEC, npt_names)
fld("shim_reserved", ProtoField.uint8, "int.shim.reserved", "Reserved")
fld("shim_length", ProtoField.uint8, "int.shim.length", "Length (4-byte words)")
fld("shim_dscp", ProtoField.uint8, "int.shim.dscp", "Original DSCP", base.HEX)
fld("shim_udp_port", ProtoField.uint16, "int.shim.udp_port", "Original UDP destination port")
fld("shim_ip_proto", ProtoField.uint8, "int.shim.ip_proto", "Original IP protocol")
fld("shim_content", ProtoField.uint16, "int.shim.content", "Content (NPT 3, reserved)", base.HEX)
fld("shim_g", ProtoField.bool, "int.shim.g", "G")
fld("shim_next_protocol", ProtoField.uint16, "int.shim.next_protocol", "Next Protocol", base.HEX)
fld("shim_option_class", ProtoField.uint16, "int.shim.option_class", "Geneve option class", base.HEX)
fld("hdr", ProtoField.bytes, "int.header", "Metadata header")
fld("ver", ProtoField.uint8, "int.ver", "Ver")
fld("d", ProtoField.bool, "int.d", "D (discard)")
fld("e", ProtoField.bool, "int.e", "E (max hop count exceeded)")
fld("m", ProtoField.bool, "int.m", "M (MTU exceeded)")
fld("reserved", ProtoField.uint32, "int.reserved", "Reserved", base.HEX)
fld("hop_ml", ProtoField.uint8, "int.hop_ml", "Hop ML (4-byte words per hop)")
fld("remaining_hop_count", ProtoField.uint8, "int.remaining_hop_count", "Remaining Hop Count")
fld("instruction_bitmap", ProtoField.uint16, "int.instruction_bitmap", "Instruction Bitmap", base.HEX)
fld("ds_id", ProtoField.uint16, "int.ds_id", "Domain Specific ID", base.HEX)
fld("ds_instruction", ProtoField.uint16, "int.ds_instruction", "DS Instruction", base.HEX)
fld("ds_flags", ProtoField.uint16, "int.ds_flags", "DS Flags", base.HEX)
fld("rep", ProtoField.uint8, "int.rep", "Rep (replication)")
fld("c", ProtoField.bool, "int.c", "C (copy)")
fld("ins_cnt", ProtoField.uint8, "int.ins_cnt", "Instruction Count")
fld("max_hop_count", ProtoField.uint8, "int.max_hop_count", "Max Hop Count")
fld("total_hop_count", ProtoField.uint8, "int.total_hop_count", "Total Hop Count")
fld("tail", ProtoField.bytes, "int.tail", "Tail header (v0.5)")
fld("tail_next_proto", ProtoField.uint8, "int.tail.next_proto", "Original IP protocol")
fld("tail_dest_port", ProtoField.uint16, "int.tail.dest_port", "Original destination port")
fld("tail_dscp", ProtoField.uint8, "int.tail.dscp", "Original DSCP byte", base.HEX)
fld("hop", ProtoField.uint8, "int.hop", "Hop (0: top of stack)")
fld("data", ProtoField.bytes, "int.data", "Undecoded INT data")

-- Per-hop (and per-report) metadata: one set under int.hop.*, one under intrep.md.*
-- (INT v2.1 section "INT-MD Metadata Header Format", Instruction Bitmap; Report v2.0 section
-- "Individual Report Main Contents for RepType 1", RepMdBits).
local INT_ONLY = { checksum_complement = true, reserved_bit8 = true, reserved_bit15 = true, queue_congestion = true,
    congestion_queue_id = true, congestion_status = true, bos = true, ingress_port_id = true, egress_port_id = true }
local REPORT_ONLY = { drop_reason = true, drop_reason_name = true }
local function md_fields(prefix, key)
    local M = {}
    local report = prefix == "intrep.md"
    local function m(k, ctor, name, ...)
        if (report and INT_ONLY[k]) or (not report and REPORT_ONLY[k]) then return end
        M[k] = ctor(prefix .. "." .. k, name, ...)
    end
    m("node_id", ProtoField.uint32, "Node ID")
    m("l1_ingress_if", ProtoField.uint16, "Level 1 ingress interface")
    m("l1_egress_if", ProtoField.uint16, "Level 1 egress interface")
    m("hop_latency", ProtoField.uint32, "Hop latency")
    m("queue_id", ProtoField.uint8, "Queue ID")
    m("queue_occupancy", ProtoField.uint32, "Queue occupancy")
    m("ingress_ts", ProtoField.uint64, "Ingress timestamp")
    m("egress_ts", ProtoField.uint64, "Egress timestamp")
    m("l2_ingress_if", ProtoField.uint32, "Level 2 ingress interface")
    m("l2_egress_if", ProtoField.uint32, "Level 2 egress interface")
    m("egress_tx_util", ProtoField.uint32, "Egress interface Tx utilization")
    m("buffer_id", ProtoField.uint8, "Buffer ID")
    m("buffer_occupancy", ProtoField.uint32, "Buffer occupancy")
    for n = 8, 15 do m("reserved_bit" .. n, ProtoField.uint32, "Reserved bit " .. n, base.HEX) end
    m("checksum_complement", ProtoField.uint32, "Checksum Complement", base.HEX)
    m("drop_reason", ProtoField.uint8, "Drop reason", base.DEC, drop_reasons)
    m("drop_reason_name", ProtoField.string, "Drop reason name")
    m("queue_congestion", ProtoField.uint32, "Queue congestion status")
    m("congestion_queue_id", ProtoField.uint8, "Congestion queue ID (v0.5 bit 6)")
    m("congestion_status", ProtoField.uint32, "Congestion status (v0.5 bit 6)")
    m("bos", ProtoField.bool, "Bottom of stack (2016 format)")
    m("ingress_port_id", ProtoField.uint32, "Ingress port ID (2016 format)")
    m("egress_port_id", ProtoField.uint32, "Egress port ID (2016 format)")
    m("unavailable", ProtoField.string, "Unavailable (all ones)")
    m("ds", ProtoField.bytes, "Domain-specific metadata")
    m("ds_name", ProtoField.string, "Name")
    m("ds_value", ProtoField.uint32, "Value")
    m("ds_bytes", ProtoField.bytes, "Value")
    m("ds_raw", ProtoField.bytes, "Raw (no registry definition)")
    F[key] = M
end
md_fields("int.hop", "HOP")
md_fields("intrep.md", "RMD")

-- Reports
fld("r_version", ProtoField.string, "intrep.version", "Report version")
fld("r_ver", ProtoField.uint8, "intrep.ver", "Ver")
fld("r_hw_id", ProtoField.uint8, "intrep.hw_id", "Hardware ID")
fld("r_seq", ProtoField.uint32, "intrep.seq", "Sequence number")
fld("r_node_id", ProtoField.uint32, "intrep.node_id", "Node ID")
fld("r_report", ProtoField.uint32, "intrep.report", "Individual report (offset in the datagram)")
fld("r_rep_type", ProtoField.uint8, "intrep.rep_type", "RepType", base.DEC, rep_types)
fld("r_in_type", ProtoField.uint8, "intrep.in_type", "InType", base.DEC, in_types)
fld("r_report_length", ProtoField.uint8, "intrep.report_length", "Report Length (words)")
fld("r_md_length", ProtoField.uint8, "intrep.md_length", "MD Length (words)")
fld("r_d", ProtoField.bool, "intrep.d", "D (dropped)")
fld("r_q", ProtoField.bool, "intrep.q", "Q (congested queue)")
fld("r_f", ProtoField.bool, "intrep.f", "F (tracked flow)")
fld("r_i", ProtoField.bool, "intrep.i", "I (intermediate)")
fld("r_rsvd", ProtoField.uint8, "intrep.rsvd", "Reserved")
fld("r_rep_md_bits", ProtoField.uint16, "intrep.rep_md_bits", "RepMdBits", base.HEX)
fld("r_ds_id", ProtoField.uint16, "intrep.ds_id", "Domain Specific ID", base.HEX)
fld("r_ds_md_bits", ProtoField.uint16, "intrep.ds_md_bits", "DSMdBits", base.HEX)
fld("r_ds_md_status", ProtoField.uint16, "intrep.ds_md_status", "DSMdstatus", base.HEX)
fld("r_md", ProtoField.none, "intrep.metadata", "Metadata")
fld("r_inner", ProtoField.bytes, "intrep.inner", "Inner packet")
fld("r_inner_data", ProtoField.bytes, "intrep.inner_data", "Inner contents")
fld("r_tlv", ProtoField.uint8, "intrep.tlv", "TLV")
fld("r_tlv_type", ProtoField.uint8, "intrep.tlv.type", "TLVType", base.DEC, tlv_types)
fld("r_tlv_length", ProtoField.uint8, "intrep.tlv.length", "TLVLength (words)")
fld("r_tlv_template", ProtoField.uint16, "intrep.tlv.template", "TLV Data Template", base.HEX)
fld("r_tlv_data", ProtoField.bytes, "intrep.tlv.data", "TLV data")
fld("r_len", ProtoField.uint8, "intrep.len", "Len (words)")
fld("r_nproto", ProtoField.uint8, "intrep.nproto", "NProto")
fld("r_v1_rep_md_bits", ProtoField.uint8, "intrep.v1_rep_md_bits", "Report metadata bits (v1.0)", base.HEX)
fld("r_ingress_ts", ProtoField.uint32, "intrep.ingress_ts", "Ingress timestamp")
fld("r_drop", ProtoField.bytes, "intrep.drop", "Drop report header (v0.5)")
fld("r_local", ProtoField.bytes, "intrep.local", "Switch-local report header (v0.5)")
fld("r_sw_node_id", ProtoField.uint32, "intrep.sw.node_id", "Switch ID")
fld("r_sw_l1_ingress_if", ProtoField.uint16, "intrep.sw.l1_ingress_if", "Ingress port")
fld("r_sw_l1_egress_if", ProtoField.uint16, "intrep.sw.l1_egress_if", "Egress port")
fld("r_sw_queue_id", ProtoField.uint8, "intrep.sw.queue_id", "Queue ID")
fld("r_sw_drop_reason", ProtoField.uint8, "intrep.sw.drop_reason", "Drop reason", base.DEC, drop_reasons)
fld("r_sw_drop_reason_name", ProtoField.string, "intrep.sw.drop_reason_name", "Drop reason name")
fld("r_sw_queue_occupancy", ProtoField.uint32, "intrep.sw.queue_occupancy", "Queue occupancy")
fld("r_sw_egress_ts", ProtoField.uint32, "intrep.sw.egress_ts", "Egress timestamp")
fld("r_sw_pad", ProtoField.uint16, "intrep.sw.pad", "Padding", base.HEX)

local int_fields, rep_fields = {}, {}
for k, v in pairs(F) do
    if k == "HOP" then
        for _, f in pairs(v) do int_fields[#int_fields + 1] = f end
    elseif k == "RMD" then
        for _, f in pairs(v) do rep_fields[#rep_fields + 1] = f end
    elseif k:sub(1, 2) == "r_" then
        rep_fields[#rep_fields + 1] = v
    else
        int_fields[#int_fields + 1] = v
    end
end
p_int.fields = int_fields
p_rep.fields = rep_fields

---------------------------------------------------------------------------------------------
-- Expert info: errors (the frame or layer could not be decoded) and the deviations `intscope
-- dump` tolerates, under the same kebab-case codes (field names use underscores).
---------------------------------------------------------------------------------------------

local E = {
    malformed = ProtoExpert.new("int.malformed", "Malformed INT", expert.group.MALFORMED, expert.severity.ERROR),
    r_malformed = ProtoExpert.new("intrep.malformed", "Malformed telemetry report", expert.group.MALFORMED,
        expert.severity.ERROR),
    e_bit = ProtoExpert.new("int.e_bit", "E: max hop count exceeded", expert.group.SEQUENCE, expert.severity.NOTE),
    m_bit = ProtoExpert.new("int.m_bit", "M: MTU exceeded", expert.group.SEQUENCE, expert.severity.NOTE),
    lua_error = ProtoExpert.new("int.dissector_bug", "intscope.lua failed on this packet (please report)",
        expert.group.MALFORMED, expert.severity.ERROR),
}
local WARNINGS = {
    ["shim-length-counts-shim"] =
        "INT shim Length counts the shim word (INT v1.0 semantics) although the header is v2; decoded with v1.0 semantics",
    ["legacy-shim-length"] = "INT v0.5 shim Length cannot be right (shorter than header and tail, or past the "
        .. "packet); the header's Total Hop Count used",
    ["legacy-hop-count"] = "INT Total Hop Count disagrees with the shim length; the shim length bounded the stack",
    ["stack-leftover"] = "INT metadata stack length is not a whole number of hops",
    ["hop-too-short"] = "Hop ML is shorter than the metadata the instruction bitmap requests",
    ["unknown-domain"] = "Domain Specific ID not in the registry: domain metadata shown raw",
    ["unmarked-int"] = "INT found without the configured INT marking (unmarked INT on)",
    ["main-contents-in-inner-only"] = "Inner-Only report (RepType 0) carries INT main contents (MD Length > 0)",
    ["inner-type-mismatch"] = "inner packet does not start with the header InType names",
    ["report-length-extended"] =
        "bytes after the report's Report Length do not form a report; kept as its inner contents",
    ["v05-layout-version-1"] = "v0.5-layout telemetry report header carries version 1",
    ["v1-report-length"] = "v1.0 telemetry report Len field is not 4",
    ["v1-header-version-0"] = "INT v1.0 metadata header carries version 0",
    ["truncated-int"] = "the report's truncated packet ends inside the INT stack; the hops present were decoded",
    ["bos-missing"] = "2016 format: the bottom-of-stack bit is not set on the last metadata word",
    ["bos-misplaced"] = "2016 format: the bottom-of-stack bit is set on a metadata word before the last",
}
local W = {}
local int_experts, rep_experts = {}, {}
for code, msg in pairs(WARNINGS) do
    local proto_name = (code:find("report") or code:find("inner") or code:find("v05") or code:find("v1-report"))
        and "intrep" or "int"
    local e = ProtoExpert.new(proto_name .. ".warning." .. code:gsub("-", "_"), msg, expert.group.PROTOCOL,
        expert.severity.WARN)
    W[code] = e
    if proto_name == "int" then int_experts[#int_experts + 1] = e else rep_experts[#rep_experts + 1] = e end
end
int_experts[#int_experts + 1] = E.malformed
int_experts[#int_experts + 1] = E.e_bit
int_experts[#int_experts + 1] = E.m_bit
int_experts[#int_experts + 1] = E.lua_error
rep_experts[#rep_experts + 1] = E.r_malformed
p_int.experts = int_experts
p_rep.experts = rep_experts

---------------------------------------------------------------------------------------------
-- Helpers
---------------------------------------------------------------------------------------------

local function popcount16(x)
    local c = 0
    while x ~= 0 do
        c = c + band(x, 1)
        x = rshift(x, 1)
    end
    return c
end
local function bitn(n) return rshift(0x8000, n) end

local function u8(tvb, o) return tvb(o, 1):uint() end
local function u16(tvb, o) return tvb(o, 2):uint() end
local function u32(tvb, o) return tvb(o, 4):uint() end

local function parse_num(s)
    s = (s or ""):gsub("^%s+", ""):gsub("%s+$", ""):gsub("_", "")
    if s == "" then return nil end
    local h = s:match("^0[xX](%x+)$")
    if h then return tonumber(h, 16) end
    return tonumber(s)
end

-- Errors: a table {msg=, off=}; raised with error() inside the parsers and caught per layer.
local function fail(off, msg) error({ intscope = true, off = off, msg = msg }, 0) end
local function need(tvb, off, n, what)
    local avail = tvb:len() - off
    if avail < n then
        fail(off, string.format("%s at byte %d: expected %d bytes, found %d", what, off, n, math.max(avail, 0)))
    end
end

-- Metadata formats: which generation's meaning the bits have.
local FMT_V2, FMT_REP, FMT_V1, FMT_V05, FMT_2016 = 1, 2, 3, 4, 5

-- INT v2.1: "Bits 4-6 ... 8 bytes"; every other bit requests 4 bytes (v1.0 / v0.5 / 2016: all 4).
local function size_of_bit(fmt, n)
    if (fmt == FMT_V2 or fmt == FMT_REP) and n >= 4 and n <= 6 then return 8 end
    return 4
end
local function baseline_len(fmt, bm)
    local wide = 0
    if fmt == FMT_V2 or fmt == FMT_REP then wide = popcount16(band(bm, 0x0e00)) end
    return (popcount16(bm) + wide) * 4
end

---------------------------------------------------------------------------------------------
-- Domain registry (intscope's domains.toml: [[domain]] id, name; [[domain.metadata]] bit, name,
-- size, mode). A small reader for that format only.
---------------------------------------------------------------------------------------------

local registry, registry_path, registry_error = nil, nil, nil

local function load_registry(path)
    registry, registry_error = nil, nil
    registry_path = path
    if path == nil or path == "" then return end
    local f, err = io.open(path, "r")
    if not f then
        registry_error = "cannot read " .. path .. ": " .. tostring(err)
        return
    end
    local reg, cur, md = {}, nil, nil
    local lineno = 0
    for line in f:lines() do
        lineno = lineno + 1
        line = line:gsub("#.*$", ""):gsub("^%s+", ""):gsub("%s+$", "")
        if line == "[[domain]]" then
            cur = { metadata = {} }
            md = nil
            reg[#reg + 1] = cur
        elseif line == "[[domain.metadata]]" then
            if not cur then registry_error = path .. ":" .. lineno .. ": metadata before [[domain]]"; break end
            md = { mode = "export" }
            cur.metadata[#cur.metadata + 1] = md
        elseif line ~= "" then
            local k, v = line:match("^([%w_]+)%s*=%s*(.-)$")
            if not k then registry_error = path .. ":" .. lineno .. ": cannot read '" .. line .. "'"; break end
            local s = v:match('^"(.*)"$') or v:match("^'(.*)'$")
            local val = s or parse_num(v)
            local target = md or cur
            if target then target[k] = val end
        end
    end
    f:close()
    if registry_error then return end
    registry = {}
    for _, d in ipairs(reg) do
        if type(d.id) == "number" then
            table.sort(d.metadata, function(a, b) return (a.bit or 0) < (b.bit or 0) end)
            d.defined = 0
            for _, m in ipairs(d.metadata) do d.defined = bor(d.defined, bitn(m.bit or 0)) end
            registry[d.id] = d
        end
    end
end

-- `Some(bytes)` of `mode` metadata `bits` requests, or nil if a set bit is undefined.
local function len_of(d, bits, mode)
    if band(bits, bnot(d.defined)) ~= 0 then return nil end
    local n = 0
    for _, m in ipairs(d.metadata) do
        if band(bits, bitn(m.bit)) ~= 0 and m.mode == mode then n = n + (m.size or 0) end
    end
    return n
end

-- Domain metadata of a hop or report: named where the registry defines the domain.
local function add_domain(tree, M, tvb, off, len, ds_id, bits, modes)
    if len <= 0 then return end
    local t = tree:add(M.ds, tvb(off, len))
    local d = registry and registry[ds_id]
    if not d then
        t:add(M.ds_raw, tvb(off, len))
        return
    end
    local at, stop = off, off + len
    for _, mode in ipairs(modes) do
        local mlen = math.min(len_of(d, bits, mode) or 0, stop - at)
        local mend = at + mlen
        for _, m in ipairs(d.metadata) do
            if band(bits, bitn(m.bit)) ~= 0 and m.mode == mode then
                local size = m.size or 0
                if at + size > mend then break end
                local it = t:add(M.ds_name, tvb(at, size), tostring(m.name))
                if size == 4 then
                    it:add(M.ds_value, tvb(at, 4))
                else
                    it:add(M.ds_bytes, tvb(at, size))
                end
                at = at + size
            end
        end
        -- Bytes of this mode beyond its definitions: a number when they are one word.
        if at < mend then
            local it = t:add(M.ds_name, tvb(at, mend - at), "unparsed")
            if mend - at == 4 then it:add(M.ds_value, tvb(at, 4)) else it:add(M.ds_bytes, tvb(at, mend - at)) end
        end
        at = mend
    end
    -- Bytes beyond every mode's metadata: always raw.
    if at < stop then
        t:add(M.ds_name, tvb(at, stop - at), "unparsed"):add(M.ds_bytes, tvb(at, stop - at))
    end
end

---------------------------------------------------------------------------------------------
-- One hop's (or report's) metadata
---------------------------------------------------------------------------------------------

local ONES32 = 0xFFFFFFFF

local function unavailable(t, M, range, name)
    t:add(M.unavailable, range, name):append_text(" (all ones)")
end

-- Adds the metadata of one hop at `off` (INT v2.1 "INT-MD Metadata Header Format": baseline
-- metadata in bit order, then domain-specific metadata, then (bit 15) the Checksum Complement;
-- Report v2.0 "Individual Report Main Contents for RepType 1": bit 15 is Queue ID + Drop Reason,
-- baseline). `dlen` bytes of domain-specific metadata. A node without a value writes the
-- "special all-ones reserved value indicating "invalid" (4 or 8 bytes of 0xFF depending on
-- metadata length)": every field of that word is unavailable (shared/spec/README.md errata).
local function add_hop(t, M, tvb, off, bm, fmt, dlen, ds_id, ds_bits)
    local at = off
    local pos = {}
    for n = 0, 15 do
        if band(bm, bitn(n)) ~= 0 and not (n == 15 and fmt == FMT_V2) then
            pos[n] = at
            at = at + size_of_bit(fmt, n)
        end
    end
    local dom_at = at
    at = at + dlen
    if fmt == FMT_V2 and band(bm, 1) ~= 0 then
        pos[15] = at
        at = at + 4
    end
    local function word(n) return u32(tvb, pos[n]) end
    local function r(n, k) return tvb(pos[n], k or 4) end
    -- 2016 format: every word is BOS(1) + value(31); 0x7FFFFFFF is "invalid" (INT 2016 5.3.3).
    if fmt == FMT_2016 then
        local names = { [0] = "node_id", "ingress_port_id", "hop_latency", "queue_occupancy", "ingress_ts",
            "egress_port_id", "queue_congestion", "egress_tx_util" }
        local bos_at = nil
        for n = 0, 15 do
            if pos[n] then
                local w = word(n)
                local v = band(w, 0x7FFFFFFF)
                local name = names[n] or ("reserved_bit" .. n)
                if v == 0x7FFFFFFF then
                    unavailable(t, M, r(n), name)
                else
                    if name == "ingress_ts" then
                        t:add(M.ingress_ts, r(n), UInt64(v))
                    else
                        t:add(M[name], r(n), v)
                    end
                end
                bos_at = bos_at or (band(w, 0x80000000) ~= 0 and pos[n])
            end
        end
        -- One flag per hop, on its first word carrying BOS (dump: `bos: true` on that hop).
        if bos_at then t:add(M.bos, tvb(bos_at, 4), true) end
        return at
    end
    -- A value of all ones is the node's "invalid" marker (see above): each field it carries is
    -- shown as unavailable instead of as a number.
    local function add_word(n, name)
        if not pos[n] then return end
        local w = word(n)
        if w == ONES32 then unavailable(t, M, r(n), name) else t:add(M[name], r(n), w) end
    end
    -- Bit `n`'s `width` bytes carry two fields, the first `first_len` bytes long.
    local function add_pair(n, width, first, first_len, second)
        local rr = r(n, width)
        if rr:bytes():tohex() == string.rep("FF", width) then
            unavailable(t, M, rr, first)
            unavailable(t, M, rr, second)
        else
            t:add(M[first], tvb(pos[n], first_len))
            t:add(M[second], tvb(pos[n] + first_len, width - first_len))
        end
    end
    add_word(0, "node_id")
    if pos[1] then add_pair(1, 4, "l1_ingress_if", 2, "l1_egress_if") end
    add_word(2, "hop_latency")
    -- Report bit 15's Queue ID stands in for bit 3's when bit 3 is absent or unavailable.
    local q15 = fmt == FMT_REP and pos[15] and word(15) ~= ONES32
    if pos[3] and q15 and word(3) == ONES32 then
        t:add(M.queue_id, r(15, 1))
        unavailable(t, M, r(3), "queue_occupancy")
    elseif pos[3] then
        add_pair(3, 4, "queue_id", 1, "queue_occupancy")
    elseif fmt == FMT_REP and pos[15] then
        if q15 then t:add(M.queue_id, r(15, 1)) else unavailable(t, M, r(15), "queue_id") end
    end
    for n = 4, 5 do
        if pos[n] then
            local name = n == 4 and "ingress_ts" or "egress_ts"
            if size_of_bit(fmt, n) == 8 then
                local rr = r(n, 8)
                if rr:bytes():tohex() == "FFFFFFFFFFFFFFFF" then unavailable(t, M, rr, name) else t:add(M[name], rr) end
            else
                local w = word(n)
                if w == ONES32 then unavailable(t, M, r(n), name) else t:add(M[name], r(n), UInt64(w)) end
            end
        end
    end
    if pos[6] then
        if fmt == FMT_V05 then
            -- INT v0.5 bit 6: queue ID (8) + congestion status (24), ONOS fabric.p4
            -- int_q_congestion_t.
            add_pair(6, 4, "congestion_queue_id", 1, "congestion_status")
        else
            -- Level 2 interfaces: two 16-bit halves of one word (v1.0), two words (v2.x).
            if fmt == FMT_V1 then
                add_pair(6, 4, "l2_ingress_if", 2, "l2_egress_if")
            else
                add_pair(6, 8, "l2_ingress_if", 4, "l2_egress_if")
            end
        end
    end
    add_word(7, "egress_tx_util")
    if pos[8] then add_pair(8, 4, "buffer_id", 1, "buffer_occupancy") end
    for n = 9, 14 do add_word(n, "reserved_bit" .. n) end
    if pos[15] then
        if fmt == FMT_REP then
            if word(15) == ONES32 then
                unavailable(t, M, r(15), "drop_reason")
            else
                local reason = u8(tvb, pos[15] + 1)
                t:add(M.drop_reason, tvb(pos[15] + 1, 1))
                if drop_reasons[reason] then
                    t:add(M.drop_reason_name, tvb(pos[15] + 1, 1), drop_reasons[reason]):set_generated()
                end
            end
        elseif fmt == FMT_V2 or fmt == FMT_V1 then
            -- INT v2.1 / v1.0: Checksum Complement; 0xFFFFFFFF means "not used" (shared/spec
            -- errata). INT v0.5 (ONOS fabric.p4) leaves bit 15 reserved.
            add_word(15, "checksum_complement")
        else
            add_word(15, "reserved_bit15")
        end
    end
    if dlen > 0 then
        local modes = { "export", "source-inserted" }
        add_domain(t, M, tvb, dom_at, dlen, ds_id, ds_bits, modes)
    end
    return at
end

---------------------------------------------------------------------------------------------
-- Dissection state: report inner packets are decoded with looser rules (an INT stack may be cut
-- off; unmarked INT in a tracked report's packet (its F bit is the marking), elsewhere only with the
-- preference on), as `intscope dump` does.
---------------------------------------------------------------------------------------------

local in_report = 0   -- > 0 while a report's inner packet is being dissected
local report_tracked = false -- the F bit of the report whose inner packet is being dissected
local unmarked_int = false   -- the "Unmarked INT" preference
local root_tree = nil -- the tree the report dissector was given (inner packets go there)
local suppress = 0    -- > 0 while the original L4 header after an INT block is dissected

local dscp_value, dscp_mask = 0x17, 0x3f
local probe_hi, probe_lo = nil, nil
local int_udp_ports = {}
local report_ports = { [32766] = true }

local f_ip_dscp = Field.new("ip.dsfield.dscp")
local f_ip6_dscp = Field.new("ipv6.tclass.dscp")

-- The DSCP of the innermost IP header before `tvb` (field offsets are in the frame's bytes).
local function current_dscp(tvb)
    local best, best_off = nil, -1
    local limit = tvb:offset()
    for _, fi in ipairs({ f_ip_dscp() }) do
        if fi.offset < limit and fi.offset > best_off then best, best_off = fi.value, fi.offset end
    end
    for _, fi in ipairs({ f_ip6_dscp() }) do
        if fi.offset < limit and fi.offset > best_off then best, best_off = fi.value, fi.offset end
    end
    return best
end

local data_dissector = Dissector.get("data")
local eth_dissector = Dissector.get("eth_withoutfcs")
local ip_dissector = Dissector.get("ip")
local ipv6_dissector = Dissector.get("ipv6")

-- Calls a Wireshark dissector; an exception it raises (a cut header...) is its own to mark, and
-- Wireshark has marked it by then: it must not become this script's error.
local function call_sub(d, tvb, pinfo, tree)
    local ok, e = pcall(d.call, d, tvb, pinfo, tree)
    if not ok and not tostring(e):find("Dissector_call") then error(e, 0) end
end

local function call_data(tvb, off, pinfo, tree)
    if off < tvb:len() then call_sub(data_dissector, tvb(off):tvb(), pinfo, tree) end
end

-- Hands a packet starting at `off` (Ethernet, IPv4 or IPv6) back to Wireshark.
local function call_packet(kind, tvb, off, len, pinfo, tree)
    if len <= 0 then return end
    local sub = tvb(off, len):tvb()
    local d = (kind == "ipv4" and ip_dissector) or (kind == "ipv6" and ipv6_dissector) or eth_dissector
    call_sub(d, sub, pinfo, tree)
end

---------------------------------------------------------------------------------------------
-- INT block parsing (shim + header), as intscope's wire crate does (crates/wire/src/int.rs)
---------------------------------------------------------------------------------------------

-- Length semantics of a v2 shim: the spec's (excludes the shim), INT v1.0 style (counts it, the
-- CableLabs deviation), or the spec's in a report's truncated packet.
local SEM_SPEC, SEM_COUNTS_SHIM, SEM_TRUNCATED = 1, 2, 3
local parse_legacy_block -- defined below parse_block

-- Parses the block at `off`; returns a table describing it (no tree items), or raises fail().
local function parse_block(tvb, off, encap, sem)
    need(tvb, off, 4, "INT shim header")
    local b0 = u8(tvb, off)
    local blk = { encap = encap, off = off, warnings = {} }
    if (encap == "tcp" or encap == "udp" or encap == "udp-new") and rshift(b0, 4) == 0 and b0 ~= 0 then
        return parse_legacy_block(tvb, off, encap, blk)
    end
    local shim = { kind = encap }
    blk.shim = shim
    if encap == "geneve" then
        -- INT v2.1 "INT over Geneve": Option Class(16) | Type(8) | R(3) Length(5).
        shim.option_class = u16(tvb, off)
        shim.type = u8(tvb, off + 2)
        shim.rsvd = rshift(u8(tvb, off + 3), 5)
        shim.length = band(u8(tvb, off + 3), 0x1f)
    elseif encap == "gre" then
        -- INT v2.1 "INT over IPv4/GRE": Type(4) G(1) Rsvd(3) | Length(8) | Next Protocol(16).
        shim.type = rshift(b0, 4)
        shim.g = band(b0, 0x08) ~= 0
        shim.rsvd = band(b0, 0x07)
        shim.length = u8(tvb, off + 1)
        shim.next_protocol = u16(tvb, off + 2)
    elseif encap == "vxlan-gpe" then
        -- INT v2.1 "INT over VXLAN GPE": Type(4) Rsvd(4) | Length(8) | G(1) Rsvd(7) | Next Protocol(8).
        shim.type = rshift(b0, 4)
        shim.rsvd = band(b0, 0x0f)
        shim.length = u8(tvb, off + 1)
        shim.g = band(u8(tvb, off + 2), 0x80) ~= 0
        shim.next_protocol = u8(tvb, off + 3)
    else
        -- INT v2.1 "INT over TCP/UDP": Type(4) NPT(2) R(2) | Length(8) | UDP port / IP proto / DSCP(16).
        shim.type = rshift(b0, 4)
        shim.npt = band(rshift(b0, 2), 3)
        shim.reserved = band(b0, 3)
        shim.length = u8(tvb, off + 1)
        shim.content = u16(tvb, off + 2)
    end
    local words = shim.length
    if sem == SEM_COUNTS_SHIM then
        blk.warnings[#blk.warnings + 1] = "shim-length-counts-shim"
        if words == 0 then fail(off + 1, "INT shim header: Length 0 cannot count the shim") end
        words = words - 1
    end
    local after = tvb:len() - off - 4
    local data_len
    if sem == SEM_TRUNCATED and words * 4 > after then
        blk.warnings[#blk.warnings + 1] = "truncated-int"
        data_len = math.floor(after / 4) * 4
    else
        if words * 4 > after then
            -- "The length of the shim header (1 word) is NOT counted since INT version 2.0".
            fail(off + 1, string.format("INT shim header at byte %d: Length claims %d bytes, only %d available",
                off, words * 4, after))
        end
        data_len = words * 4
    end
    local d = off + 4
    blk.version = 2
    blk.spec = "2.1"
    blk.itype = shim.type
    if shim.type == 1 or shim.type == 3 then
        if data_len < 12 then
            fail(d, string.format("INT %s header at byte %d: expected 12 bytes, found %d",
                shim.type == 1 and "MD" or "MX", d, data_len))
        end
        local h = { ver = rshift(u8(tvb, d), 4) }
        if h.ver ~= 2 then
            fail(d, string.format("INT %s header at byte %d: Ver is %d, expected 2",
                shim.type == 1 and "MD" or "MX", d, h.ver))
        end
        h.d = band(u8(tvb, d), 0x08) ~= 0
        if shim.type == 1 then
            -- INT v2.1 "INT-MD Metadata Header Format": Ver(4) D E M Reserved(12) Hop ML(5) RHC(8).
            local w0 = u32(tvb, d)
            h.e = band(u8(tvb, d), 0x04) ~= 0
            h.m = band(u8(tvb, d), 0x02) ~= 0
            h.reserved = band(rshift(w0, 13), 0x0fff)
            h.hop_ml = band(u8(tvb, d + 2), 0x1f)
            h.rhc = u8(tvb, d + 3)
            blk.kind = "md"
        else
            -- INT v2.1 "INT-MX Header Format": Ver(4) D Reserved(27).
            h.reserved = band(u32(tvb, d), 0x07ffffff)
            blk.kind = "mx"
        end
        h.bitmap = u16(tvb, d + 4)
        h.ds_id = u16(tvb, d + 6)
        h.ds_instruction = u16(tvb, d + 8)
        h.ds_flags = u16(tvb, d + 10)
        blk.hdr = h
        blk.body_off, blk.body_len = d + 12, data_len - 12
    else
        blk.kind = "opaque"
        blk.body_off, blk.body_len = d, data_len
    end
    blk.len = 4 + data_len
    return blk
end

-- INT v1.0 / v0.5 (crates/wire/src/legacy.rs): shim `type(8) rsvd(8) len(8) dscp/rsvd(8)`; the
-- metadata header tells v1.0 (`ver(4) rep(2) c e m rsvd(10) hop_ml(5) rhc(8) | bitmap(16)
-- rsvd(16)`, GEANT int-platforms / AmLight) from v0.5 (`ver(2) rep(2) c e rsvd(5) ins_cnt(5) |
-- max_hop(8) total_hop(8) | bitmap(16) rsvd(16)` and a tail `next_proto(8) dest_port(16)
-- dscp(8)`, ONOS fabric.p4).
parse_legacy_block = function(tvb, off, encap, blk)
    local shim = { kind = "legacy", type = u8(tvb, off), reserved = u8(tvb, off + 1), length = u8(tvb, off + 2),
        last = u8(tvb, off + 3) }
    blk.shim = shim
    blk.itype = shim.type
    need(tvb, off + 4, 8, "INT v1.0/v0.5 metadata header")
    local h0, h1, h2, h3 = u8(tvb, off + 4), u8(tvb, off + 5), u8(tvb, off + 6), u8(tvb, off + 7)
    local bitmap = u16(tvb, off + 8)
    local count = popcount16(bitmap)
    local v05_consistent = rshift(h0, 6) == 0 and band(h1, 0x1f) == count and count > 0
    local v1_consistent = band(h2, 0x1f) == count
    local start = off + 12
    local avail = tvb:len() - off
    local nibble = rshift(h0, 4)
    if nibble == 1 or (nibble == 0 and not v05_consistent and v1_consistent) then
        local h = { ver = rshift(h0, 4), rep = band(rshift(h0, 2), 3), c = band(h0, 2) ~= 0, e = band(h0, 1) ~= 0,
            m = band(h1, 0x80) ~= 0, hop_ml = band(h2, 0x1f), rhc = h3, bitmap = bitmap,
            reserved = u16(tvb, off + 10) }
        if h.ver == 0 then blk.warnings[#blk.warnings + 1] = "v1-header-version-0" end
        local total = shim.length * 4
        if total < 12 then
            fail(off + 2, string.format("INT shim header at byte %d: len (v1.0, words incl. shim) is %d, expected at least 3",
                off, shim.length))
        end
        if total > avail then
            fail(off + 2, string.format("INT shim header at byte %d: len claims %d bytes, only %d available",
                off, total, avail))
        end
        blk.kind, blk.version, blk.spec, blk.hdr = "v1", 1, "1.0", h
        blk.body_off, blk.body_len, blk.len = start, total - 12, total
        return blk
    end
    if not v05_consistent then
        if rshift(h0, 6) ~= 0 then
            -- Neither v1.0's version nibble (1, or 0 from some generators) nor v0.5's 2-bit 0.
            fail(off + 4, string.format("INT v1.0/v0.5 header at byte %d: Ver is %d, expected 1 (INT v1.0, 4 bits) "
                .. "or 0 (INT v0.5, 2 bits)", off + 4, nibble))
        end
        fail(off + 4, string.format("INT v1.0/v0.5 header at byte %d: metadata header 0x%08x is neither a v1.0 "
            .. "nor a v0.5 header consistent with its instruction bitmap",
            off + 4, u32(tvb, off + 4)))
    end
    local h = { ver = rshift(h0, 6), rep = band(rshift(h0, 4), 3), c = band(h0, 0x08) ~= 0, e = band(h0, 0x04) ~= 0,
        ins_cnt = band(h1, 0x1f), max_hop = h2, total_hop = h3, bitmap = bitmap,
        reserved = u16(tvb, off + 10) }
    -- The shim length bounds the stack (what follows the block is read from there); a Total Hop
    -- Count that disagrees is a warning. A shim length that cannot be right (shorter than header
    -- and tail, past the bytes: generators that leave it 0) gives way to the count.
    local counted = h.total_hop * h.ins_cnt * 4
    local by_shim = shim.length * 4
    local stack_len
    if by_shim >= 16 and by_shim <= avail then
        stack_len = by_shim - 16
        if stack_len ~= counted then blk.warnings[#blk.warnings + 1] = "legacy-hop-count" end
    else
        blk.warnings[#blk.warnings + 1] = "legacy-shim-length"
        if 16 + counted > avail then
            fail(off + 7, string.format(
                "INT v0.5 header at byte %d: total_hop_count claims %d bytes, only %d available",
                off + 4, 16 + counted, avail))
        end
        stack_len = counted
    end
    local total = 12 + stack_len + 4
    blk.kind, blk.version, blk.spec, blk.hdr = "v05", 0, "0.5", h
    blk.body_off, blk.body_len, blk.len = start, stack_len, total
    blk.tail_off = start + stack_len
    return blk
end

-- INT 2016 format over VXLAN-GPE (int-spec-2016.txt 5.3.2-5.3.3): shim `Type(8) Reserved(8)
-- Length(8) NextProto(8)`, Length counting the shim; header `Ver(2) Rep(2) C E R(5) InsCnt(5) |
-- MaxHopCnt(8) TotalHopCnt(8) | Instruction bitmap(16) Reserved(16)`; InsCnt * TotalHopCnt
-- words of `BOS(1) value(31)`.
local function parse_2016_block(tvb, off)
    need(tvb, off, 4, "INT (2016) shim header")
    local shim = { kind = "2016", type = u8(tvb, off), rsvd = u8(tvb, off + 1), length = u8(tvb, off + 2),
        next_protocol = u8(tvb, off + 3) }
    local blk = { encap = "vxlan-gpe", off = off, warnings = {}, shim = shim, itype = shim.type,
        version = 0, spec = "2016", kind = "2016" }
    local total = shim.length * 4
    local avail = tvb:len() - off
    if total < 4 then
        fail(off + 2, string.format("INT (2016) shim at byte %d: Length %d is shorter than the shim", off, shim.length))
    end
    if total > avail then
        fail(off + 2, string.format("INT (2016) shim at byte %d: Length claims %d bytes, only %d available", off, total, avail))
    end
    blk.len = total
    local h = nil
    if total >= 12 then
        local h0, h1 = u8(tvb, off + 4), u8(tvb, off + 5)
        h = { ver = rshift(h0, 6), rep = band(rshift(h0, 4), 3), c = band(h0, 0x08) ~= 0, e = band(h0, 0x04) ~= 0,
            ins_cnt = band(h1, 0x1f), max_hop = u8(tvb, off + 6), total_hop = u8(tvb, off + 7), bitmap = u16(tvb, off + 8) }
    end
    local consistent = h and h.ver == 0 and h.ins_cnt > 0 and h.ins_cnt == popcount16(h.bitmap)
    -- A hop-by-hop header (type 1) must be a consistent version-0 header; a destination header
    -- (type 2) is decoded the same way when it is one (as in the specification's example), kept
    -- as opaque data otherwise (crates/wire/src/legacy.rs `parse_gpe_2016`).
    if shim.type == 1 then
        if not h then
            fail(off + 4, string.format("INT (2016) header at byte %d: needs 8 bytes, only %d available",
                off + 4, total - 4))
        elseif h.ver ~= 0 then
            fail(off + 4, string.format("INT (2016) header at byte %d: Ver is %d, expected 0 (2016 specification)",
                off + 4, h.ver))
        elseif not consistent then
            fail(off + 5, string.format("INT (2016) header at byte %d: Instruction Count %d is not the number of bits "
                .. "set in the instruction bitmap 0x%04x", off + 4, h.ins_cnt, h.bitmap))
        end
    end
    if consistent and (shim.type == 1 or shim.type == 2) then
        blk.hdr = h
        blk.body_off, blk.body_len = off + 12, total - 12
        -- "the length of the INT metadata stack must always be (Instruction Count * 4 * Total Hop
        -- Count)": the shim length bounds the stack, a count that disagrees is a warning.
        if h.ins_cnt * 4 * h.total_hop ~= blk.body_len then
            blk.warnings[#blk.warnings + 1] = "legacy-hop-count"
        end
    else
        blk.kind = "opaque"
        blk.body_off, blk.body_len = off + 4, total - 4
    end
    return blk
end

---------------------------------------------------------------------------------------------
-- INT block rendering
---------------------------------------------------------------------------------------------

local function warn(tree, code)
    tree:add_proto_expert_info(W[code])
end

local function add_shim(t, tvb, blk)
    local s, off = blk.shim, blk.off
    local st = t:add(F.shim, tvb(off, 4))
    local r = tvb(off, 4)
    if s.kind == "legacy" then
        st:add(F.shim_type, tvb(off, 1), s.type)
        st:add(F.shim_reserved, tvb(off + 1, 1), s.reserved)
        st:add(F.shim_length, tvb(off + 2, 1), s.length)
        st:add(F.shim_dscp, tvb(off + 3, 1), rshift(s.last, 2))
    elseif s.kind == "2016" then
        st:add(F.shim_type, tvb(off, 1), s.type)
        st:add(F.shim_reserved, tvb(off + 1, 1), s.rsvd)
        st:add(F.shim_length, tvb(off + 2, 1), s.length)
        st:add(F.shim_next_protocol, tvb(off + 3, 1), s.next_protocol)
    elseif s.kind == "geneve" then
        st:add(F.shim_option_class, tvb(off, 2), s.option_class)
        st:add(F.shim_type, tvb(off + 2, 1), s.type)
        st:add(F.shim_length, tvb(off + 3, 1), s.length)
    elseif s.kind == "gre" then
        st:add(F.shim_type, r, s.type)
        st:add(F.shim_g, r, s.g)
        st:add(F.shim_length, tvb(off + 1, 1), s.length)
        st:add(F.shim_next_protocol, tvb(off + 2, 2), s.next_protocol)
    elseif s.kind == "vxlan-gpe" then
        st:add(F.shim_type, r, s.type)
        st:add(F.shim_length, tvb(off + 1, 1), s.length)
        st:add(F.shim_g, tvb(off + 2, 1), s.g)
        st:add(F.shim_next_protocol, tvb(off + 3, 1), s.next_protocol)
    else
        st:add(F.shim_type, tvb(off, 1), s.type)
        st:add(F.shim_npt, tvb(off, 1), s.npt)
        st:add(F.shim_length, tvb(off + 1, 1), s.length)
        if s.npt == 0 then
            st:add(F.shim_dscp, tvb(off + 3, 1), rshift(band(s.content, 0xff), 2))
        elseif s.npt == 1 then
            st:add(F.shim_udp_port, tvb(off + 2, 2), s.content)
        elseif s.npt == 2 then
            st:add(F.shim_ip_proto, tvb(off + 3, 1), band(s.content, 0xff))
        else
            st:add(F.shim_content, tvb(off + 2, 2), s.content)
        end
        if s.reserved ~= 0 then st:add(F.shim_reserved, tvb(off, 1), s.reserved) end
    end
end

-- The metadata stack of an INT-MD / v1.0 / v0.5 / 2016 block (crates/wire/src/int.rs `stack`):
-- hops of Hop ML words, newest first; the source's hop may carry 'source-only' domain metadata
-- (INT v2.1: excluded from Hop ML, counted in the shim Length).
local function add_stack(t, tvb, blk, pinfo)
    local h = blk.hdr
    local fmt, hop_len
    if blk.kind == "md" then
        fmt, hop_len = FMT_V2, h.hop_ml * 4
    elseif blk.kind == "v1" then
        fmt, hop_len = FMT_V1, h.hop_ml * 4
    elseif blk.kind == "v05" then
        fmt, hop_len = FMT_V05, h.ins_cnt * 4
    else
        fmt, hop_len = FMT_2016, h.ins_cnt * 4
    end
    local body_off, body_len = blk.body_off, blk.body_len
    -- 2016 section 5.3.3: BOS marks "the last metadata instance in the stack"; checked over every
    -- whole word of the stack (crates/wire/src/int.rs `bos_check`).
    if fmt == FMT_2016 then
        local words = math.floor(body_len / 4)
        local misplaced = false
        for k = 0, words - 2 do
            if band(u8(tvb, body_off + 4 * k), 0x80) ~= 0 then misplaced = true end
        end
        if words > 0 and band(u8(tvb, body_off + 4 * (words - 1)), 0x80) == 0 then warn(t, "bos-missing") end
        if misplaced then warn(t, "bos-misplaced") end
    end
    local base = baseline_len(fmt, h.bitmap)
    if base > hop_len then
        warn(t, "hop-too-short")
        return
    end
    local domain_len = hop_len - base
    local source_only = 0
    if fmt == FMT_V2 then
        local inferred = hop_len == 0 and body_len or body_len % hop_len
        source_only = inferred
        if h.ds_id ~= 0 and h.ds_instruction ~= 0 then
            local d = registry and registry[h.ds_id]
            local known = nil
            if d then
                local export = len_of(d, h.ds_instruction, "export")
                local source = len_of(d, h.ds_instruction, "source-inserted")
                if export and source and export == domain_len and body_len >= source then known = source end
            end
            if known then source_only = known else warn(t, "unknown-domain") end
        elseif inferred ~= 0 then
            warn(t, "stack-leftover")
        end
    end
    local leftover
    if hop_len == 0 then
        leftover = body_len
    elseif body_len - source_only >= 0 then
        leftover = (body_len - source_only) % hop_len
    else
        leftover = body_len
    end
    if leftover ~= 0 then warn(t, "stack-leftover") end
    if hop_len == 0 then return end
    local hop_total = base + domain_len
    local at, i = 0, 0
    local ds_id = h.ds_id or 0
    local ds_bits = h.ds_instruction or 0
    while at < body_len do
        local remaining = body_len - at
        local is_last = remaining < 2 * hop_len + source_only
        local dlen = domain_len + (is_last and source_only or 0)
        local total = hop_total + (is_last and source_only or 0)
        if remaining < total then
            t:add_proto_expert_info(E.malformed, string.format(
                "INT metadata stack at byte %d: hop %d needs %d bytes, only %d available", body_off + at, i, total,
                remaining))
            return
        end
        local ht = t:add(F.hop, tvb(body_off + at, total), i)
        ht:set_text(string.format("Hop %d%s", i, i == 0 and " (top of stack: most recent)" or ""))
        add_hop(ht, F.HOP, tvb, body_off + at, h.bitmap, fmt, dlen, ds_id, ds_bits)
        at = at + math.max(total, math.min(hop_len, remaining))
        i = i + 1
    end
end

-- Adds an INT block's tree (block already parsed), returning the tree item.
-- A header flag that also raises a note in the expert info when set (E: max hop count
-- exceeded, M: MTU exceeded), so a filter on the expert finds the packets.
local function add_noted_flag(ht, field, range, set, note)
    local it = ht:add(field, range, set)
    if set then it:add_proto_expert_info(note) end
end

-- Bytes 4-11 of the INT-MD and INT-MX headers, alike in both (INT v2.1 "INT-MD Metadata Header
-- Format", "INT-MX Header Format"): Instruction Bitmap, Domain Specific ID, DS Instruction,
-- DS Flags.
local function add_bitmap_and_domain(ht, tvb, hoff, h)
    ht:add(F.instruction_bitmap, tvb(hoff + 4, 2), h.bitmap)
    ht:add(F.ds_id, tvb(hoff + 6, 2), h.ds_id)
    ht:add(F.ds_instruction, tvb(hoff + 8, 2), h.ds_instruction)
    ht:add(F.ds_flags, tvb(hoff + 10, 2), h.ds_flags)
end

-- The first byte of the v1.0, v0.5 and 2016 metadata headers: Ver, Rep, C and E alike
-- (the generations share that byte's layout); returns the 8-byte header's tree item.
local function add_ver_rep_c_e(t, tvb, hoff, h)
    local ht = t:add(F.hdr, tvb(hoff, 8))
    ht:add(F.ver, tvb(hoff, 1), h.ver)
    ht:add(F.rep, tvb(hoff, 1), h.rep)
    ht:add(F.c, tvb(hoff, 1), h.c)
    add_noted_flag(ht, F.e, tvb(hoff, 1), h.e, E.e_bit)
    return ht
end

local function add_block(tree, tvb, blk, pinfo, stacked)
    local t = tree:add(p_int, tvb(blk.off, blk.len))
    local names = { md = "INT-MD", mx = "INT-MX", v1 = "INT v1.0", v05 = "INT v0.5", ["2016"] = "INT (2016)" }
    local what = names[blk.kind] or ("type " .. blk.itype)
    t:append_text(string.format(", %s over %s%s", what, blk.encap, stacked and " (stacked)" or ""))
    blk.summary = what
    t:add(F.encap, tvb(blk.off, 0), blk.encap)
    t:add(F.type, tvb(blk.off, 0), blk.itype)
    t:add(F.version, tvb(blk.off, 0), blk.version)
    t:add(F.spec, tvb(blk.off, 0), blk.spec)
    t:add(F.offset, tvb(blk.off, 0), tvb:offset() + blk.off):set_generated()
    add_shim(t, tvb, blk)
    for _, w in ipairs(blk.warnings) do warn(t, w) end
    local h = blk.hdr
    local hoff = blk.off + 4
    if blk.kind == "md" then
        local ht = t:add(F.hdr, tvb(hoff, 12))
        ht:add(F.ver, tvb(hoff, 1), h.ver)
        ht:add(F.d, tvb(hoff, 1), h.d)
        add_noted_flag(ht, F.e, tvb(hoff, 1), h.e, E.e_bit)
        add_noted_flag(ht, F.m, tvb(hoff, 1), h.m, E.m_bit)
        if h.reserved ~= 0 then ht:add(F.reserved, tvb(hoff, 3), h.reserved) end
        ht:add(F.hop_ml, tvb(hoff + 2, 1), h.hop_ml)
        ht:add(F.remaining_hop_count, tvb(hoff + 3, 1), h.rhc)
        add_bitmap_and_domain(ht, tvb, hoff, h)
        add_stack(t, tvb, blk, pinfo)
    elseif blk.kind == "mx" then
        local ht = t:add(F.hdr, tvb(hoff, 12))
        ht:add(F.ver, tvb(hoff, 1), h.ver)
        ht:add(F.d, tvb(hoff, 1), h.d)
        if h.reserved ~= 0 then ht:add(F.reserved, tvb(hoff, 4), h.reserved) end
        add_bitmap_and_domain(ht, tvb, hoff, h)
        -- INT v2.1 "INT-MX Header Format": optional source-inserted domain-specific metadata.
        add_domain(t, F.HOP, tvb, blk.body_off, blk.body_len, h.ds_id, h.ds_instruction, { "source-inserted" })
    elseif blk.kind == "v1" then
        local ht = add_ver_rep_c_e(t, tvb, hoff, h)
        add_noted_flag(ht, F.m, tvb(hoff + 1, 1), h.m, E.m_bit)
        ht:add(F.hop_ml, tvb(hoff + 2, 1), h.hop_ml)
        ht:add(F.remaining_hop_count, tvb(hoff + 3, 1), h.rhc)
        ht:add(F.instruction_bitmap, tvb(hoff + 4, 2), h.bitmap)
        add_stack(t, tvb, blk, pinfo)
    elseif blk.kind == "v05" or (blk.kind == "2016") then
        local ht = add_ver_rep_c_e(t, tvb, hoff, h)
        ht:add(F.ins_cnt, tvb(hoff + 1, 1), h.ins_cnt)
        ht:add(F.max_hop_count, tvb(hoff + 2, 1), h.max_hop)
        ht:add(F.total_hop_count, tvb(hoff + 3, 1), h.total_hop)
        ht:add(F.instruction_bitmap, tvb(hoff + 4, 2), h.bitmap)
        add_stack(t, tvb, blk, pinfo)
        if blk.kind == "v05" then
            local to = blk.tail_off
            local tt = t:add(F.tail, tvb(to, 4))
            tt:add(F.tail_next_proto, tvb(to, 1))
            tt:add(F.tail_dest_port, tvb(to + 1, 2))
            tt:add(F.tail_dscp, tvb(to + 3, 1))
        end
    else
        t:add(F.data, tvb(blk.body_off, blk.body_len))
    end
    return t
end

-- Adds an expert error for a parse failure `err` (from fail()) or re-raises a Lua error.
local function add_error(tree, proto, ei, tvb, err)
    if type(err) ~= "table" or not err.intscope then error(err, 0) end
    local off = math.max(0, math.min(err.off or 0, tvb:len()))
    local t = tree:add(proto, tvb(off, tvb:len() - off))
    t:append_text(" [Malformed: " .. err.msg .. "]")
    t:add_proto_expert_info(ei, err.msg)
    return t
end

local function is_internal(err) return type(err) == "table" and err.intscope end

---------------------------------------------------------------------------------------------
-- INT after TCP/UDP (INT v2.1 "INT over TCP/UDP"; crates/wire/src/locate.rs `l4_int`)
---------------------------------------------------------------------------------------------

local ip_proto_table = nil

local function plausible_l4(tvb, off, proto)
    local n = tvb:len() - off
    if proto == 6 then
        return n >= 20 and rshift(u8(tvb, off + 12), 4) >= 5 and u16(tvb, off) ~= 0 and u16(tvb, off + 2) ~= 0
    elseif proto == 17 then
        return n >= 8 and u16(tvb, off + 2) ~= 0 and u16(tvb, off + 4) == n
    end
    return true
end

-- Whether an INT block found without a marking is INT by every rule checkable without one: the
-- TCP/UDP shim's reserved bits and fields (INT v2.1 "INT over TCP/UDP"), the header's reserved
-- bits and bitmap, and a stack of whole hops. A domain's sizes are not checked here, so a block
-- of a domain (DS ID other than 0) is not taken; nor INT-MX, whose body is domain metadata.
local function unmarked_exact(tvb, blk)
    local s, h = blk.shim, blk.hdr
    if not h or blk.body_len == 0 then return false end
    if s.kind == "tcp" or s.kind == "udp" or s.kind == "udp-new" then
        if s.reserved ~= 0 then return false end
        if s.npt == 0 then
            if band(s.content, 0xff03) ~= 0 then return false end
        elseif s.npt == 1 then
            if s.content == 0 then return false end
        elseif s.npt == 2 then
            if rshift(s.content, 8) ~= 0
                or not plausible_l4(tvb, blk.off + blk.len, band(s.content, 0xff)) then return false end
        else
            return false
        end
    elseif s.kind == "legacy" then
        if s.type ~= 1 or s.reserved ~= 0 then return false end
    else
        return false
    end
    if blk.kind == "md" then
        local hop_len = h.hop_ml * 4
        return h.reserved == 0 and h.bitmap ~= 0 and band(h.bitmap, 0x007e) == 0
            and h.ds_id == 0 and h.ds_instruction == 0 and h.ds_flags == 0
            and hop_len == baseline_len(FMT_V2, h.bitmap) and blk.body_len % hop_len == 0
    elseif blk.kind == "v1" then
        local n = popcount16(h.bitmap)
        return h.ver == 1 and h.rep == 0 and not h.c and h.reserved == 0 and h.bitmap ~= 0
            and h.hop_ml >= n and h.hop_ml <= 2 * n and blk.body_len % (h.hop_ml * 4) == 0
    elseif blk.kind == "v05" then
        for _, w in ipairs(blk.warnings) do
            if w == "legacy-shim-length" or w == "legacy-hop-count" then return false end
        end
        return h.rep == 0 and not h.c and h.reserved == 0 and h.bitmap ~= 0
            and h.ins_cnt == popcount16(h.bitmap) and h.total_hop <= h.max_hop
    end
    return false
end

local function dissect_l4_int(tvb, off, encap, pinfo, tree, heuristic)
    local ok, blk = pcall(parse_block, tvb, off, encap, SEM_SPEC)
    if not ok and in_report > 0 and is_internal(blk) and blk.msg:find("Length claims") then
        ok, blk = pcall(parse_block, tvb, off, encap, SEM_TRUNCATED)
    end
    if not ok then
        if heuristic then return false end
        add_error(tree, p_int, E.malformed, tvb, blk)
        return true
    end
    if heuristic then
        -- Unmarked INT: taken only where the bytes leave no other reading, every reserved
        -- field zero and the lengths exact (crates/wire/src/locate.rs `unmarked_exact`).
        if not unmarked_exact(tvb, blk) then return false end
        blk.warnings[#blk.warnings + 1] = "unmarked-int"
    end
    local s = blk.shim
    if s.kind == "tcp" or s.kind == "udp" then
        if s.npt == 2 and encap == "udp" then
            blk.encap = "udp-new"
            -- Tolerate producers whose v2 shim Length counts the shim (CableLabs): prefer the
            -- reading after which the original L4 header is plausible.
            local proto = band(s.content, 0xff)
            if not plausible_l4(tvb, off + blk.len, proto) then
                local ok2, alt = pcall(parse_block, tvb, off, "udp", SEM_COUNTS_SHIM)
                if ok2 and plausible_l4(tvb, off + alt.len, proto) then
                    alt.encap = "udp-new"
                    blk = alt
                end
            end
        end
    end
    add_block(tree, tvb, blk, pinfo, false)
    local after = off + blk.len
    if after < tvb:len() then
        if s.npt == 2 and (blk.encap == "udp-new") then
            -- INT v2.1: with NPT=2 "the original L4 header follows the INT stack".
            local proto = band(s.content, 0xff)
            local d = ip_proto_table and ip_proto_table:get_dissector(proto)
            if d then
                suppress = suppress + 1
                local okc, e = pcall(call_sub, d, tvb(after):tvb(), pinfo, tree)
                suppress = suppress - 1
                if not okc then error(e, 0) end
            else
                call_data(tvb, after, pinfo, tree)
            end
        else
            call_data(tvb, after, pinfo, tree)
        end
    end
    -- Set after the layers behind INT, which write the columns too.
    pinfo.cols.protocol:set("INT")
    pinfo.cols.info:append(" [" .. blk.summary .. "]")
    return true
end

local function dscp_marked(tvb)
    if not dscp_value then return false end
    local d = current_dscp(tvb)
    return d ~= nil and band(d, dscp_mask) == band(dscp_value, dscp_mask)
end

local function probe_at(tvb)
    if not probe_hi or tvb:len() < 8 then return false end
    return u32(tvb, 0) == probe_hi and u32(tvb, 4) == probe_lo
end

local function guarded(fn)
    return function(tvb, pinfo, tree)
        local ok, r = pcall(fn, tvb, pinfo, tree)
        if ok then return r end
        -- A bug of this script must not hide the packet: mark it and show the message.
        local t = tree:add(p_int, tvb())
        t:add_proto_expert_info(E.lua_error, "intscope.lua: " .. tostring(type(r) == "table" and r.msg or r))
        return tvb:len()
    end
end

local function heur_l4(encap)
    return guarded(function(tvb, pinfo, tree)
        if suppress > 0 or tvb:len() == 0 then return false end
        if encap == "udp" then
            local dport = pinfo.dst_port
            if report_ports[dport] or int_udp_ports[dport] then return false end
        end
        if dscp_marked(tvb) then
            return dissect_l4_int(tvb, 0, encap, pinfo, tree, false)
        elseif probe_at(tvb) then
            return dissect_l4_int(tvb, 8, encap, pinfo, tree, false)
        elseif (in_report == 0 and unmarked_int) or (in_report > 0 and report_tracked) then
            -- Report v2.0 "Individual Report Header": with F = 0 "there will not be any
            -- embedded telemetry metadata in the report".
            return dissect_l4_int(tvb, 0, encap, pinfo, tree, true)
        end
        return false
    end)
end

local udp_int = Proto("int_udp", "INT over UDP (port)")
-- An INT UDP port: the shim follows the UDP header (INT v2.1 "INT over TCP/UDP": "a new UDP
-- port number (INT_TBD) will be assigned by IANA to indicate the existence of INT after UDP").
udp_int.dissector = guarded(function(tvb, pinfo, tree)
    dissect_l4_int(tvb, 0, "udp", pinfo, tree, false)
    return tvb:len()
end)

---------------------------------------------------------------------------------------------
-- INT over VXLAN-GPE (INT v2.1 "INT over VXLAN GPE"; 2016 format 5.3.2)
---------------------------------------------------------------------------------------------

local gpe_table = nil

local function dispatch_gpe(next_proto, tvb, off, pinfo, tree)
    if off >= tvb:len() then return end
    local sub = tvb(off):tvb()
    if gpe_table then
        local ok, r = pcall(gpe_table.try, gpe_table, next_proto, sub, pinfo, tree)
        if not ok and not tostring(r):find("Dissector") then error(r, 0) end
        if not ok or r then return end
    end
    call_sub(data_dissector, sub, pinfo, tree)
end

local gpe_depth = 0
local f_gpe_p = Field.new("vxlan.p_bit")

-- draft-ietf-nvo3-vxlan-gpe: "The P bit MUST be set to 1 to indicate the presence of the 8 bit
-- next protocol field"; Wireshark's VXLAN dissector hands the next protocol on regardless.
local function gpe_p_bit_clear(tvb)
    local p, off = nil, -1
    for _, fi in ipairs({ f_gpe_p() }) do
        if fi.offset < tvb:offset() and fi.offset > off then p, off = fi.value, fi.offset end
    end
    return p == 0
end

-- The INT-over-VXLAN-GPE dissectors differ only in how the block is parsed, which next-protocol
-- values mean "another INT header follows", and the Info text.
local function gpe_dissector(parse, is_int_next, info)
    return guarded(function(tvb, pinfo, tree)
        if gpe_depth == 0 and gpe_p_bit_clear(tvb) then
            add_error(tree, p_int, E.malformed, tvb,
                { intscope = true, off = 0, msg = "VXLAN-GPE header: P bit is 0, expected 1 (next protocol present)" })
            return tvb:len()
        end
        local ok, blk = pcall(parse, tvb)
        if not ok then
            add_error(tree, p_int, E.malformed, tvb, blk)
            return tvb:len()
        end
        add_block(tree, tvb, blk, pinfo, gpe_depth > 0)
        local nxt = blk.shim.next_protocol
        if gpe_depth >= 7 and is_int_next(nxt) then
            tree:add_proto_expert_info(E.malformed, "more than 8 stacked INT headers")
            return tvb:len()
        end
        gpe_depth = gpe_depth + 1
        local okc, e = pcall(dispatch_gpe, nxt, tvb, blk.len, pinfo, tree)
        gpe_depth = gpe_depth - 1
        if not okc then error(e, 0) end
        pinfo.cols.protocol:set("INT")
        pinfo.cols.info:append(info(blk))
        return tvb:len()
    end)
end

local gpe_int = Proto("int_gpe", "INT over VXLAN-GPE")
gpe_int.dissector = gpe_dissector(
    function(tvb) return parse_block(tvb, 0, "vxlan-gpe", SEM_SPEC) end,
    function(nxt) return nxt == p_int.prefs.gpe_next_proto end,
    function(blk) return " [" .. blk.summary .. " over VXLAN-GPE]" end)

local gpe_2016 = Proto("int_gpe2016", "INT (2016) over VXLAN-GPE")
-- "all VXLAN GPE headers for the INT Headers other than the last one will carry 0x05".
gpe_2016.dissector = gpe_dissector(
    function(tvb) return parse_2016_block(tvb, 0) end,
    function(nxt) return nxt == p_int.prefs.gpe_next_proto or nxt == p_int.prefs.gpe_next_proto_2016 end,
    function() return " [INT (2016) over VXLAN-GPE]" end)

---------------------------------------------------------------------------------------------
-- INT over GRE (INT v2.1 "INT over IPv4/GRE": GRE protocol type TBD_INT, then the GRE shim)
---------------------------------------------------------------------------------------------

local ethertype_table = nil
local gre_int = Proto("int_gre", "INT over GRE")
gre_int.dissector = guarded(function(tvb, pinfo, tree)
    local ok, blk = pcall(parse_block, tvb, 0, "gre", SEM_SPEC)
    if not ok then
        add_error(tree, p_int, E.malformed, tvb, blk)
        return tvb:len()
    end
    add_block(tree, tvb, blk, pinfo, false)
    if blk.len < tvb:len() then
        local sub = tvb(blk.len):tvb()
        local np = blk.shim.next_protocol
        if np == 0x6558 then
            call_sub(eth_dissector, sub, pinfo, tree)
        else
            local okt, r = pcall(ethertype_table.try, ethertype_table, np, sub, pinfo, tree)
            if not okt and not tostring(r):find("Dissector") then error(r, 0) end
            if okt and not r then call_sub(data_dissector, sub, pinfo, tree) end
        end
    end
    pinfo.cols.protocol:set("INT")
    pinfo.cols.info:append(" [" .. blk.summary .. " over GRE]")
    return tvb:len()
end)

---------------------------------------------------------------------------------------------
-- INT over Geneve (INT v2.1 "INT over Geneve": an option of class 0x0103 whose type is the INT
-- type). Wireshark's Geneve dissector shows the options; this adds the INT decode of ours.
---------------------------------------------------------------------------------------------

local geneve_orig = nil
local geneve_int = Proto("int_geneve", "INT over Geneve")
geneve_int.dissector = guarded(function(tvb, pinfo, tree)
    if geneve_orig then call_sub(geneve_orig, tvb, pinfo, tree) end
    if tvb:len() < 8 then return tvb:len() end
    -- RFC 8926: Ver(2) Opt Len(6) | O C Rsvd(6) | Protocol Type(16) | VNI(24) | Reserved(8).
    local b0 = u8(tvb, 0)
    if rshift(b0, 6) ~= 0 then
        tree:add_proto_expert_info(E.malformed, string.format("Geneve header: Ver is %d, expected 0", rshift(b0, 6)))
        return tvb:len()
    end
    local stop = 8 + band(b0, 0x3f) * 4
    if stop > tvb:len() then
        tree:add_proto_expert_info(E.malformed, string.format("Geneve Opt Len claims %d bytes, only %d available",
            stop, tvb:len()))
        return tvb:len()
    end
    -- Options in order, as dump reads them: the first INT option is decoded when reached (a
    -- malformed one ends the header); a malformed option after it keeps the INT block shown
    -- before the error, as dump keeps the layers before a malformed one.
    local at, shown = 8, false
    while at + 4 <= stop do
        local class = u16(tvb, at)
        local olen = 4 + band(u8(tvb, at + 3), 0x1f) * 4
        if at + olen > stop then
            tree:add_proto_expert_info(E.malformed, string.format(
                "Geneve option at byte %d: Length claims %d bytes, only %d available", at, olen, stop - at))
            return tvb:len()
        end
        if class == p_int.prefs.geneve_class and not shown then
            shown = true
            local opt = tvb(0, at + olen):tvb()
            local ok, blk = pcall(parse_block, opt, at, "geneve", SEM_SPEC)
            if not ok then
                add_error(tree, p_int, E.malformed, opt, blk)
                return tvb:len()
            end
            pinfo.cols.protocol:set("INT")
            pinfo.cols.info:append(" [INT over Geneve]")
            add_block(tree, opt, blk, pinfo, false)
        end
        at = at + olen
    end
    return tvb:len()
end)

---------------------------------------------------------------------------------------------
-- Telemetry reports (crates/wire/src/report.rs)
---------------------------------------------------------------------------------------------

local function is_packet_type(t) return t == 3 or t == 4 or t == 5 end

-- Whether the bytes at `off` (`n` of them) plausibly start a packet of InType `t`.
local function plausible_packet(tvb, off, n, t)
    if n < 0 then return false end
    if t == 4 then
        if n < 20 then return false end
        local b = u8(tvb, off)
        return rshift(b, 4) == 4 and band(b, 0xf) >= 5
    elseif t == 5 then
        return n >= 40 and rshift(u8(tvb, off), 4) == 6
    elseif t == 3 then
        if n < 14 then return false end
        local at = 12
        local et = u16(tvb, off + at)
        while (et == 0x8100 or et == 0x88a8 or et == 0x9100) and n >= at + 6 do
            at = at + 4
            et = u16(tvb, off + at)
        end
        local nx, nn = off + at + 2, n - at - 2
        if et == 0x0800 then return plausible_packet(tvb, nx, nn, 4)
        elseif et == 0x86dd then return plausible_packet(tvb, nx, nn, 5)
        elseif et == 0x0806 or et == 0x8847 or et == 0x8848 then return true end
        return false
    end
    return false
end

-- The length a packet's own headers declare, if readable.
local function declared_packet_len(tvb, off, n, t)
    if t == 4 and n >= 4 and rshift(u8(tvb, off), 4) == 4 then return u16(tvb, off + 2) end
    if t == 5 and n >= 6 and rshift(u8(tvb, off), 4) == 6 then return 40 + u16(tvb, off + 4) end
    if t == 3 and n >= 14 then
        local at = 12
        while n >= at + 6 and (u16(tvb, off + at) == 0x8100 or u16(tvb, off + at) == 0x88a8
            or u16(tvb, off + at) == 0x9100) do
            at = at + 4
        end
        local et = u16(tvb, off + at)
        local inner = et == 0x0800 and 4 or (et == 0x86dd and 5 or nil)
        if not inner then return nil end
        local l = declared_packet_len(tvb, off + at + 2, n - at - 2, inner)
        return l and (l + at + 2)
    end
    return nil
end

local function in_type_kind(t) return (t == 4 and "ipv4") or (t == 5 and "ipv6") or "eth" end

-- Dissects a report's inner packet with Wireshark's own dissectors, in report mode.
-- `tracked`: the report's F bit.
local function report_inner(kind, tvb, off, len, pinfo, tree, tracked)
    if len <= 0 then return end
    local t = tree:add(F.r_inner, tvb(off, len))
    t:set_text(string.format("Inner packet (%d bytes)", len))
    in_report = in_report + 1
    local was_tracked = report_tracked
    report_tracked = tracked
    local ok, e = pcall(call_packet, kind, tvb, off, len, pinfo, root_tree or tree)
    report_tracked = was_tracked
    in_report = in_report - 1
    if not ok then error(e, 0) end
end

-- One individual report's header fields (Report v2.0 "Individual Report Header": RepType(4)
-- InType(4) | Report Length(8) | MD Length(8) | D Q F I Rsvd(4)).
local function read_individual(tvb, off)
    local b0 = u8(tvb, off)
    local b3 = u8(tvb, off + 3)
    return { rep_type = rshift(b0, 4), in_type = band(b0, 0xf), report_length = u8(tvb, off + 1),
        md_length = u8(tvb, off + 2), d = band(b3, 0x80) ~= 0, q = band(b3, 0x40) ~= 0, f = band(b3, 0x20) ~= 0,
        i = band(b3, 0x10) ~= 0, rsvd = band(b3, 0xf) }
end

local function plausible_in(h, remaining)
    return h.rep_type <= 2 and h.in_type <= 5 and (h.report_length == 0xff or 4 + h.report_length * 4 <= remaining)
end

-- Whether a header could start a report whatever its length (report.rs `starts_report`): rest
-- that does, but does not fit, is a report the datagram was cut inside, not a too-short length.
local function starts_report(h)
    return h.rep_type <= 2 and h.in_type <= 5
        and (h.rep_type ~= 1 or h.report_length == 0xff or h.md_length + 2 <= h.report_length)
end

-- Layout of one individual report in [off, off+rest): Report v2.0 "Individual Report Main
-- Contents for RepType 1" (RepMdBits(16) DS ID(16) | DSMdBits(16) DSMdstatus(16) | metadata),
-- with the tolerances of crates/wire/src/report.rs `layout`. Returns a table or fails.
local function layout_individual(tvb, off, rest)
    need(tvb, off, 4, "Individual report header")
    local h = read_individual(tvb, off)
    local warnings = {}
    local declared_end = h.report_length == 0xff and rest or (4 + h.report_length * 4)
    if declared_end > rest then
        fail(off + 1, string.format("Individual report at byte %d: Report Length claims %d bytes, only %d available",
            off, declared_end, rest))
    end
    local body_off, body_len = off + 4, declared_end - 4
    local look_len = rest - 4
    local declared = h.in_type
    local md_len = h.md_length * 4
    local main, md_off, md_n, inner_at = nil, nil, 0, 0
    if h.rep_type == 1 then
        if body_len < 8 then
            fail(body_off, string.format("Individual report at byte %d: INT main contents need 8 bytes, found %d",
                off, body_len))
        end
        main = body_off
        local md_end = 8 + md_len
        if md_end > body_len then
            fail(off + 2, string.format("Individual report at byte %d: MD Length claims %d bytes, only %d available",
                off, md_end, body_len))
        end
        md_off, md_n, inner_at = body_off + 8, md_len, md_end
    elseif h.rep_type == 0 and md_len ~= 0 and body_len >= 8 and not plausible_packet(tvb, body_off, look_len, declared) then
        -- Tolerated: INT main contents in an Inner-Only report (CableLabs); find the packet.
        warnings[#warnings + 1] = "main-contents-in-inner-only"
        main = body_off
        local limit = math.min(8 + md_len, body_len)
        if is_packet_type(declared) then
            inner_at = limit
            for k = 8, limit, 4 do
                if plausible_packet(tvb, body_off + k, look_len - k, declared)
                    or plausible_packet(tvb, body_off + k, look_len - k, 3) then
                    inner_at = k
                    break
                end
            end
        else
            inner_at = math.min(8 + baseline_len(FMT_REP, u16(tvb, body_off)), limit)
        end
        md_off, md_n = body_off + 8, inner_at - 8
    end
    local inner_type = declared
    local ahead_off, ahead_n = body_off + inner_at, look_len - inner_at
    if (declared == 4 or declared == 5) and not plausible_packet(tvb, ahead_off, ahead_n, declared)
        and plausible_packet(tvb, ahead_off, ahead_n, 3) then
        warnings[#warnings + 1] = "inner-type-mismatch"
        inner_type = 3
    end
    local r = { off = off, h = h, main = main, md_off = md_off, md_n = md_n, inner_off = body_off + inner_at,
        inner_n = body_len - inner_at, inner_type = inner_type, warnings = warnings }
    local inner_rel = 4 + inner_at
    local stop = declared_end
    if stop < rest then
        -- Bytes remain: coalesced reports, or a Report Length too short (tolerated when the rest
        -- is no report, or when the inner packet's own length ends exactly at the end).
        local next_ok = rest - stop >= 4 and plausible_in(read_individual(tvb, off + stop), rest - stop)
        -- Rest shorter than a header, or starting like a report that does not fit: a report
        -- the datagram was cut inside, left to the next report's layout (which fails on it).
        local cut = rest - stop < 4 or starts_report(read_individual(tvb, off + stop))
        local l = declared_packet_len(tvb, off + inner_rel, rest - inner_rel, inner_type)
        local inner_fills = l ~= nil and inner_rel + l == rest
        if (not next_ok and not cut) or inner_fills then
            warnings[#warnings + 1] = "report-length-extended"
            stop = rest
            r.inner_n = rest - inner_rel
        end
    end
    r.len = stop
    return r
end

local function add_individual(tree, tvb, r, pinfo, index, datagram_off)
    local h = r.h
    local t = tree:add(F.r_report, tvb(r.off, r.len), r.off - datagram_off)
    t:set_text(string.format("Individual report %d: %s, inner %s", index,
        rep_types[h.rep_type] or ("reserved " .. h.rep_type), in_types[h.in_type] or ("reserved " .. h.in_type)))
    t:add(F.r_rep_type, tvb(r.off, 1), h.rep_type)
    t:add(F.r_in_type, tvb(r.off, 1), h.in_type)
    t:add(F.r_report_length, tvb(r.off + 1, 1), h.report_length)
    t:add(F.r_md_length, tvb(r.off + 2, 1), h.md_length)
    t:add(F.r_d, tvb(r.off + 3, 1), h.d)
    t:add(F.r_q, tvb(r.off + 3, 1), h.q)
    t:add(F.r_f, tvb(r.off + 3, 1), h.f)
    t:add(F.r_i, tvb(r.off + 3, 1), h.i)
    if h.rsvd ~= 0 then t:add(F.r_rsvd, tvb(r.off + 3, 1), h.rsvd) end
    for _, w in ipairs(r.warnings) do warn(t, w) end
    if r.main then
        local m = r.main
        local bits = u16(tvb, m)
        local ds_id, ds_bits = u16(tvb, m + 2), u16(tvb, m + 4)
        t:add(F.r_rep_md_bits, tvb(m, 2))
        t:add(F.r_ds_id, tvb(m + 2, 2))
        t:add(F.r_ds_md_bits, tvb(m + 4, 2))
        t:add(F.r_ds_md_status, tvb(m + 6, 2))
        local base = baseline_len(FMT_REP, bits)
        if r.md_n < base then
            t:add_proto_expert_info(E.r_malformed, string.format(
                "report metadata at byte %d: RepMdBits 0x%04x need %d bytes, MD Length gives %d", r.md_off, bits, base, r.md_n))
        else
            local mt = t:add(F.r_md, tvb(r.md_off, r.md_n))
            add_hop(mt, F.RMD, tvb, r.md_off, bits, FMT_REP, r.md_n - base, ds_id, ds_bits)
        end
    end
    if is_packet_type(r.inner_type) and r.inner_n > 0 then
        report_inner(in_type_kind(r.inner_type), tvb, r.inner_off, r.inner_n, pinfo, t, h.f)
    elseif r.inner_type == 1 then
        -- Report v2.0 "Individual Report Inner Contents for InType 1": TLVType(4) Rsvd(4) |
        -- TLVLength(8) | TLV Data Template(16) | data.
        local at, stop, i = r.inner_off, r.inner_off + r.inner_n, 0
        while at < stop do
            if stop - at < 4 then
                t:add_proto_expert_info(E.r_malformed, string.format("TLV at byte %d: expected 4 bytes, found %d",
                    at, stop - at))
                break
            end
            local tl = 4 + u8(tvb, at + 1) * 4
            if at + tl > stop then
                t:add_proto_expert_info(E.r_malformed, string.format(
                    "TLV at byte %d: TLVLength claims %d bytes, only %d available", at, tl, stop - at))
                break
            end
            local ttype = rshift(u8(tvb, at), 4)
            local tt = t:add(F.r_tlv, tvb(at, tl), i)
            tt:set_text(string.format("TLV %d: %s", i, tlv_types[ttype] or ("type " .. ttype)))
            tt:add(F.r_tlv_type, tvb(at, 1), ttype)
            tt:add(F.r_tlv_length, tvb(at + 1, 1))
            tt:add(F.r_tlv_template, tvb(at + 2, 2))
            if ttype >= 1 and ttype <= 3 then
                if tl == 4 then
                    tt:add_proto_expert_info(E.r_malformed, string.format("TLV at byte %d: an empty %s packet", at,
                        tlv_types[ttype]))
                end
                report_inner(in_type_kind(ttype + 2), tvb, at + 4, tl - 4, pinfo, tt, h.f)
            else
                tt:add(F.r_tlv_data, tvb(at + 4, tl - 4))
            end
            at = at + tl
            i = i + 1
        end
    elseif r.inner_n > 0 then
        t:add(F.r_inner_data, tvb(r.inner_off, r.inner_n))
    end
end

local report_summary = nil -- the Info column of the report being dissected

-- The v1.0 and v0.5 report headers' first word both carry the D, Q and F flags as three
-- adjacent bits (D the highest, at `d_mask`) and the 6-bit hardware ID in the low bits.
local function add_dqf_hw_id(t, r, w, d_mask)
    t:add(F.r_d, r, band(w, d_mask) ~= 0)
    t:add(F.r_q, r, band(w, rshift(d_mask, 1)) ~= 0)
    t:add(F.r_f, r, band(w, rshift(d_mask, 2)) ~= 0)
    t:add(F.r_hw_id, r, band(w, 0x3f))
end

-- Telemetry Report v1.0 (GEANT int-platforms int_report.p4): `ver(4) len(4) nprot(3)
-- rep_md_bits(6) rsvd(6) d q f hw_id(6) | switch_id(32) | seq_num(32) | ingress_tstamp(32)`.
local function report_v1(t, tvb, pinfo)
    need(tvb, 0, 16, "Telemetry report v1.0 header")
    local w = u32(tvb, 0)
    local r = tvb(0, 4)
    t:add(F.r_version, tvb(0, 1), "1.0")
    t:add(F.r_ver, tvb(0, 1), rshift(w, 28))
    local len = band(rshift(w, 24), 0xf)
    t:add(F.r_len, tvb(0, 1), len)
    if len ~= 4 then warn(t, "v1-report-length") end
    local nproto = band(rshift(w, 21), 7)
    t:add(F.r_nproto, r, nproto)
    t:add(F.r_v1_rep_md_bits, r, band(rshift(w, 15), 0x3f))
    add_dqf_hw_id(t, r, w, 0x100)
    t:add(F.r_node_id, tvb(4, 4))
    t:add(F.r_seq, tvb(8, 4))
    t:add(F.r_ingress_ts, tvb(12, 4))
    report_summary = string.format("Telemetry report v1.0, switch %d, seq %d", u32(tvb, 4), u32(tvb, 8))
    local kind = (nproto == 1 and "ipv4") or (nproto == 2 and "ipv6") or "eth"
    report_inner(kind, tvb, 16, tvb:len() - 16, pinfo, t, band(w, 0x40) ~= 0)
end

-- Telemetry Report v0.5 (stratum/fabric-tna p4src/shared/header.p4): `ver(4) nproto(4) | d q f
-- rsvd(15) hw_id(6) | seq_no(32) | ig_tstamp(32)`, then a drop (nproto 1) or switch-local
-- (nproto 2) header, then the Ethernet frame.
local function report_v05(t, tvb, pinfo, version1)
    need(tvb, 0, 12, "Telemetry report v0.5 header")
    if version1 then warn(t, "v05-layout-version-1") end
    local w = u32(tvb, 0)
    local r = tvb(0, 4)
    t:add(F.r_version, tvb(0, 1), "0.5")
    t:add(F.r_ver, tvb(0, 1), rshift(w, 28))
    local nproto = band(rshift(w, 24), 0xf)
    t:add(F.r_nproto, tvb(0, 1), nproto)
    if nproto > 2 then
        fail(0, string.format("Telemetry report v0.5: NProto is %d, expected 0 (Ethernet), 1 (drop) or 2 (switch-local)", nproto))
    end
    add_dqf_hw_id(t, r, w, 0x00800000)
    t:add(F.r_seq, tvb(4, 4))
    t:add(F.r_ingress_ts, tvb(8, 4))
    report_summary = string.format("Telemetry report v0.5%s, seq %d",
        (nproto == 1 and " (drop)") or (nproto == 2 and " (switch-local)") or "", u32(tvb, 4))
    local at = 12
    if nproto ~= 0 then
        local len = nproto == 1 and 12 or 16
        need(tvb, 12, len, nproto == 1 and "Drop report header" or "Switch-local report header")
        local st = t:add(nproto == 1 and F.r_drop or F.r_local, tvb(12, len))
        st:add(F.r_sw_node_id, tvb(12, 4))
        st:add(F.r_sw_l1_ingress_if, tvb(16, 2))
        st:add(F.r_sw_l1_egress_if, tvb(18, 2))
        st:add(F.r_sw_queue_id, tvb(20, 1))
        if nproto == 1 then
            local reason = u8(tvb, 21)
            st:add(F.r_sw_drop_reason, tvb(21, 1))
            if drop_reasons[reason] then
                st:add(F.r_sw_drop_reason_name, tvb(21, 1), drop_reasons[reason]):set_generated()
            end
            st:add(F.r_sw_pad, tvb(22, 2))
        else
            st:add(F.r_sw_queue_occupancy, tvb(21, 3))
            st:add(F.r_sw_egress_ts, tvb(24, 4))
        end
        at = 12 + len
    end
    report_inner("eth", tvb, at, tvb:len() - at, pinfo, t, band(w, 0x00200000) ~= 0)
end

-- Telemetry Report v2.0 (Report v2.0 "Telemetry Report Group Header": Ver(4) hw_id(6)
-- Sequence(22) | Node ID(32)), then coalesced individual reports.
local function report_v2(t, tvb, pinfo)
    need(tvb, 0, 8, "Telemetry report group header")
    local w = u32(tvb, 0)
    t:add(F.r_version, tvb(0, 1), "2.0")
    t:add(F.r_ver, tvb(0, 1), rshift(w, 28))
    t:add(F.r_hw_id, tvb(0, 2), band(rshift(w, 22), 0x3f))
    t:add(F.r_seq, tvb(0, 4), band(w, 0x3fffff))
    t:add(F.r_node_id, tvb(4, 4))
    local at, n, i = 8, tvb:len(), 1
    while at < n do
        local ok, r = pcall(layout_individual, tvb, at, n - at)
        if not ok then
            if not is_internal(r) then error(r, 0) end
            t:add_proto_expert_info(E.r_malformed, r.msg)
            break
        end
        add_individual(t, tvb, r, pinfo, i, 0)
        at = at + r.len
        i = i + 1
    end
    report_summary = string.format("Telemetry report v2.0, node %d, seq %d, %d report%s", u32(tvb, 4),
        band(w, 0x3fffff), i - 1, i == 2 and "" or "s")
end

-- Version detection (crates/wire/src/report.rs `Report::parse`): nibble 2 is v2.0, 0 is v0.5,
-- 1 is v1.0 or a v0.5 layout carrying version 1: the layout whose inner packet starts where its
-- header says (or that ends exactly at the end) wins.
local function v05_extra(nproto)
    if nproto == 0 then return 0 elseif nproto == 1 then return 12 elseif nproto == 2 then return 16 end
    return nil
end

p_rep.dissector = guarded(function(tvb, pinfo, tree)
    local t = tree:add(p_rep, tvb())
    report_summary = "Telemetry report"
    local saved_root = root_tree
    root_tree = tree
    local ok, err = pcall(function()
        need(tvb, 0, 4, "Telemetry report header")
        local n = tvb:len()
        local v = rshift(u8(tvb, 0), 4)
        if v == 2 then
            report_v2(t, tvb, pinfo)
        elseif v == 0 then
            report_v05(t, tvb, pinfo, false)
        elseif v == 1 then
            local low = band(u8(tvb, 0), 0xf)
            local extra = v05_extra(low)
            local v05_fits = false
            if extra then
                local at = 12 + extra
                v05_fits = n == at or (n > at and plausible_packet(tvb, at, n - at, 3))
            end
            local v1_fits = n == 16 or (n > 16 and plausible_packet(tvb, 16, n - 16, 3))
            local len_is_4 = low == 4
            if v05_fits and not (v1_fits and len_is_4) then
                report_v05(t, tvb, pinfo, true)
            elseif v1_fits or len_is_4 then
                report_v1(t, tvb, pinfo)
            elseif extra then
                report_v05(t, tvb, pinfo, true)
            else
                report_v1(t, tvb, pinfo)
            end
        else
            fail(0, string.format("Telemetry report: Ver is %d, expected 2 (v2.0), 1 (v1.0) or 0 (v0.5)", v))
        end
    end)
    root_tree = saved_root
    -- Set last: the inner packets' dissectors write the columns too.
    pinfo.cols.protocol:set("INT report")
    pcall(function() pinfo.cols.info:clear_fence() end)
    pinfo.cols.info:set(report_summary)
    if not ok then
        if not is_internal(err) then error(err, 0) end
        t:append_text(" [Malformed: " .. err.msg .. "]")
        t:add_proto_expert_info(E.r_malformed, err.msg)
    end
    return tvb:len()
end)

---------------------------------------------------------------------------------------------
-- Registration and preference handling
---------------------------------------------------------------------------------------------

local registered = { int_ports = {}, rep_ports = {}, gre = nil, gpe = nil, gpe2016 = nil }

local function range_set(s)
    local set = {}
    for part in tostring(s or ""):gmatch("[^,%s]+") do
        local a, b = part:match("^(%d+)%-(%d+)$")
        if a then
            for p = tonumber(a), math.min(tonumber(b), 65535) do set[p] = true end
        elseif tonumber(part) then
            set[tonumber(part)] = true
        end
    end
    return set
end

local function apply_prefs()
    local udp = DissectorTable.get("udp.port")
    ip_proto_table = DissectorTable.get("ip.proto")
    ethertype_table = DissectorTable.get("ethertype")
    local ok_gpe, t = pcall(DissectorTable.get, "vxlan.next_proto")
    gpe_table = ok_gpe and t or nil
    -- The ports registered last time are removed first, so a changed preference moves them.
    local function register_ports(key, ports, dissector)
        for p in pairs(registered[key]) do udp:remove(p, dissector) end
        registered[key] = {}
        for p in pairs(ports) do
            udp:add(p, dissector)
            registered[key][p] = true
        end
    end
    int_udp_ports = range_set(p_int.prefs.udp_ports)
    register_ports("int_ports", int_udp_ports, udp_int)
    report_ports = range_set(p_rep.prefs.udp_ports)
    register_ports("rep_ports", report_ports, p_rep)
    -- DSCP value[/mask]
    local ds = tostring(p_int.prefs.dscp or "")
    if ds:lower() == "none" or ds == "" then
        dscp_value = nil
    else
        local v, m = ds:match("^%s*([^/]+)/(.+)$")
        dscp_value = parse_num(v or ds)
        dscp_mask = parse_num(m or "0x3f") or 0x3f
    end
    -- Probe marker
    local pm = tostring(p_int.prefs.probe_marker or ""):gsub("^0[xX]", ""):gsub("%s", "")
    if pm ~= "" and #pm <= 16 and pm:match("^%x+$") then
        pm = string.rep("0", 16 - #pm) .. pm
        probe_hi, probe_lo = tonumber(pm:sub(1, 8), 16), tonumber(pm:sub(9, 16), 16)
    else
        probe_hi, probe_lo = nil, nil
    end
    -- GRE protocol type
    local gre = DissectorTable.get("gre.proto")
    if registered.gre then gre:remove(registered.gre, gre_int) end
    registered.gre = parse_num(p_int.prefs.gre_proto)
    if registered.gre then gre:add(registered.gre, gre_int) end
    -- VXLAN-GPE next protocols
    if gpe_table then
        if registered.gpe then gpe_table:remove(registered.gpe, gpe_int) end
        if registered.gpe2016 then gpe_table:remove(registered.gpe2016, gpe_2016) end
        registered.gpe = p_int.prefs.gpe_next_proto
        gpe_table:add(registered.gpe, gpe_int)
        registered.gpe2016 = p_int.prefs.gpe_next_proto_2016
        if registered.gpe2016 ~= 0 then gpe_table:add(registered.gpe2016, gpe_2016) else registered.gpe2016 = nil end
    end
    -- Geneve: ours wraps the port's dissector.
    local cur = udp:get_dissector(6081)
    if cur and tostring(cur) ~= "INT over Geneve" and not geneve_orig then geneve_orig = cur end
    if geneve_orig then udp:add(6081, geneve_int) end
    if p_int.prefs.domains ~= registry_path then load_registry(p_int.prefs.domains) end
    unmarked_int = p_int.prefs.unmarked
end

function p_int.prefs_changed() apply_prefs() end
function p_rep.prefs_changed() apply_prefs() end

p_int:register_heuristic("udp", heur_l4("udp"))
p_int:register_heuristic("tcp", heur_l4("tcp"))
apply_prefs()
