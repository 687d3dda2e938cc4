{% from "sysctl/map.jinja" import sysctl with context %}
{% for name, value in sysctl.params | dictsort %}
sysctl_{{ name }}:
  sysctl.present:
    - name: {{ name }}
    - value: {{ value }}
    - config: {{ sysctl.config }}
{% endfor %}
