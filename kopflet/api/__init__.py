"""The Pod API types the agent reads, quantities and QoS (k8s.io/api core/v1, apimachinery resource, helper/qos), and
apimachinery's name validation and metav1.Time."""
