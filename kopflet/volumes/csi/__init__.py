"""The CSI volume plugin's node side (upstream pkg/volume/csi at v1.37.1): the CSI spec generated in `proto`, the
client of a driver's Identity and Node services, the drivers registered through the plugin manager, and the
node information (the Node's annotation and labels, the CSINode object) their NodeGetInfo gives."""
