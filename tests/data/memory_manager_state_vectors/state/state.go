package state

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/davecgh/go-spew/spew"
	"vec/checksum"
	v1 "vec/v1"
)

var cfg = &spew.ConfigState{Indent: " ", SortKeys: true, DisableMethods: true, SpewKeys: true, DisablePointerAddresses: true, DisableCapacities: true}

func ForHash(a interface{}) string { return cfg.Sprintf("%#v", a) }

type MemoryTable struct {
	TotalMemSize   uint64 `json:"total"`
	SystemReserved uint64 `json:"systemReserved"`
	Allocatable    uint64 `json:"allocatable"`
	Reserved       uint64 `json:"reserved"`
	Free           uint64 `json:"free"`
}
type NUMANodeState struct {
	NumberOfAssignments int                              `json:"numberOfAssignments"`
	MemoryMap           map[v1.ResourceName]*MemoryTable `json:"memoryMap"`
	Cells               []int                            `json:"cells"`
}
type NUMANodeMap map[int]*NUMANodeState
type Block struct {
	NUMAAffinity []int           `json:"numaAffinity"`
	Type         v1.ResourceName `json:"type"`
	Size         uint64          `json:"size"`
}
type ContainerMemoryAssignments map[string]map[string][]Block
type PodMemoryAssignments map[string][]Block

type MemoryManagerCheckpointData struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
	PodEntries   PodMemoryAssignments       `json:"podEntries,omitempty"`
}
type MemoryManagerCheckpointV1 struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
	Checksum     checksum.Checksum          `json:"checksum"`
}
type MemoryManagerCheckpoint struct {
	MemoryManagerCheckpointV1 `json:",inline"`
	Data                      string                      `json:"data"`
	DataChecksum              checksum.Checksum           `json:"dataChecksum"`
	CheckpointData            MemoryManagerCheckpointData `json:"-"`
}

func sum(s string) checksum.Checksum {
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", s)
	return checksum.Checksum(h.Sum32())
}

func (mp *MemoryManagerCheckpoint) Marshal() ([]byte, string) {
	data, _ := json.Marshal(mp.CheckpointData)
	mp.Data = string(data)
	mp.DataChecksum = sum(ForHash(mp.Data))
	mp.PolicyName = mp.CheckpointData.PolicyName
	mp.MachineState = mp.CheckpointData.MachineState
	mp.Entries = mp.CheckpointData.Entries
	mp.Checksum = 0
	object := ForHash(&mp.MemoryManagerCheckpointV1)
	object = strings.Replace(object, "MemoryManagerCheckpointV1", "MemoryManagerCheckpoint", 1)
	mp.Checksum = sum(object)
	out, _ := json.Marshal(*mp)
	return out, object
}
