package main

import (
	"fmt"

	"vec/state"
	v1 "vec/v1"
)

func node(id int, total, sysres, hp uint64) *state.NUMANodeState {
	m := map[v1.ResourceName]*state.MemoryTable{
		"memory": {TotalMemSize: total, SystemReserved: sysres, Allocatable: total - sysres - hp, Free: total - sysres - hp},
	}
	if hp > 0 {
		m["hugepages-2Mi"] = &state.MemoryTable{TotalMemSize: hp, Allocatable: hp, Free: hp}
	}
	return &state.NUMANodeState{MemoryMap: m, Cells: []int{id}}
}

func emit(name string, cp *state.MemoryManagerCheckpoint) {
	out, spew := cp.Marshal()
	fmt.Printf("== %s\n%s\n%s\n", name, spew, out)
}

func main() {
	// 1: empty single-node None policy
	emit("none", &state.MemoryManagerCheckpoint{CheckpointData: state.MemoryManagerCheckpointData{PolicyName: "None", MachineState: state.NUMANodeMap{}, Entries: state.ContainerMemoryAssignments{}}})
	// 2: static, one node, no entries
	emit("static-empty", &state.MemoryManagerCheckpoint{CheckpointData: state.MemoryManagerCheckpointData{PolicyName: "Static", MachineState: state.NUMANodeMap{0: node(0, 8589934592, 1073741824, 0)}, Entries: state.ContainerMemoryAssignments{}}})
	// 3: static, two nodes + hugepages, one pod with two containers
	ms := state.NUMANodeMap{0: node(0, 8589934592, 536870912, 1073741824), 1: node(1, 8589934592, 536870912, 0)}
	ms[0].NumberOfAssignments = 2
	ms[0].MemoryMap["memory"].Reserved = 1073741824
	ms[0].MemoryMap["memory"].Free -= 1073741824
	ms[0].MemoryMap["hugepages-2Mi"].Reserved = 4194304
	ms[0].MemoryMap["hugepages-2Mi"].Free -= 4194304
	emit("static-pod", &state.MemoryManagerCheckpoint{CheckpointData: state.MemoryManagerCheckpointData{PolicyName: "Static", MachineState: ms, Entries: state.ContainerMemoryAssignments{
		"pod-a": {"app": {{NUMAAffinity: []int{0}, Type: "hugepages-2Mi", Size: 4194304}, {NUMAAffinity: []int{0}, Type: "memory", Size: 1073741824}}},
	}}})
	// 4: static, cross-NUMA group and a 10+ node id (key order)
	ms4 := state.NUMANodeMap{}
	for _, id := range []int{0, 1, 2, 10} {
		ms4[id] = node(id, 1073741824, 0, 0)
	}
	ms4[0].MemoryMap["memory"].SystemReserved = 104857600
	ms4[0].MemoryMap["memory"].Allocatable -= 104857600
	ms4[0].MemoryMap["memory"].Free = 0
	ms4[0].MemoryMap["memory"].Reserved = ms4[0].MemoryMap["memory"].Allocatable
	ms4[1].MemoryMap["memory"].Free -= 100
	ms4[1].MemoryMap["memory"].Reserved = 100
	ms4[0].NumberOfAssignments, ms4[1].NumberOfAssignments = 1, 1
	ms4[0].Cells, ms4[1].Cells = []int{0, 1}, []int{0, 1}
	emit("static-cross", &state.MemoryManagerCheckpoint{CheckpointData: state.MemoryManagerCheckpointData{PolicyName: "Static", MachineState: ms4, Entries: state.ContainerMemoryAssignments{
		"7f6f7d3b-0f1a-4c52-9a5b-3f1e2d4c5b6a": {"big": {{NUMAAffinity: []int{0, 1}, Type: "memory", Size: ms4[0].MemoryMap["memory"].Allocatable + 100}}, "init": {{NUMAAffinity: []int{0, 1}, Type: "memory", Size: 0}}},
	}}})
}
