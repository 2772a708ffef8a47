package kubectlworkflow

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// userAgent names the plugin in the API server's audit log.
const userAgent = "kubectl-workflow"

// configFlags are kubectl's connection flags (--kubeconfig, --context,
// -n/--namespace, --server, --token, --as, --request-timeout, ...), read
// with client-go's kubeconfig loading rules: KUBECONFIG or ~/.kube/config
// unless --kubeconfig names a file.
type configFlags struct {
	rules     *clientcmd.ClientConfigLoadingRules
	overrides *clientcmd.ConfigOverrides
}

func newConfigFlags() *configFlags {
	return &configFlags{rules: clientcmd.NewDefaultClientConfigLoadingRules(), overrides: &clientcmd.ConfigOverrides{}}
}

// addFlags binds the flags to fs.
func (c *configFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.rules.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "",
		"Path to the kubeconfig file to use for CLI requests.")
	clientcmd.BindOverrideFlags(c.overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
}

// clientConfig is the kubeconfig as the flags select it.
func (c *configFlags) clientConfig() clientcmd.ClientConfig {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(c.rules, c.overrides)
}

// namespace is -n, or else the current context's namespace, or else
// "default".
func (c *configFlags) namespace() (string, error) {
	ns, _, err := c.clientConfig().Namespace()
	if err != nil {
		return "", fmt.Errorf("read the namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

// restConfig is the client configuration for the API server.
func (c *configFlags) restConfig() (*rest.Config, error) {
	cfg, err := c.clientConfig().ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load the kubeconfig: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = userAgent
	return cfg, nil
}

// dynamicClient is a client for the API server as the flags configure it.
func (c *configFlags) dynamicClient() (dynamic.Interface, error) {
	cfg, err := c.restConfig()
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	return dc, nil
}

// runsIn returns the WorkflowRuns of namespace ns ("" for every namespace).
func (c *configFlags) runsIn(ns string) (*runs, error) {
	dc, err := c.dynamicClient()
	if err != nil {
		return nil, err
	}
	return &runs{dc: dc, ns: ns}, nil
}

// runsOfNamespace returns the WorkflowRuns of the namespace the flags and
// kubeconfig select.
func (c *configFlags) runsOfNamespace() (*runs, error) {
	ns, err := c.namespace()
	if err != nil {
		return nil, err
	}
	return c.runsIn(ns)
}
