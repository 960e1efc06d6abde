package v1

type ResourceName string
